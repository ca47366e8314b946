#pragma once
// Verify mode (docs/verify.md): a sampled cache hit is compiled again, uncached, and compared with
// the entry. What program::compile needs for it: the rate, the sample, the comparison with
// NVRTC's per-process names masked, and the report a mismatch leaves.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cucore/options.hpp"

namespace cucore::detail {

// The replayed compile's clock: 400 days and 7 hours on (another date and hour; __TIME__'s
// minutes and seconds may stay, its hour cannot).
inline constexpr std::int64_t kVerifyClockShiftSeconds = (400 * 24 + 7) * 3600;

// options.verify, else CUCORE_VERIFY (read once), else 0. Throws invalid_argument for a value
// outside [0, 1] in the field; a bad variable is 0, with a warning.
double verify_rate(const program_options& options);

// Whether this hit is one of the `rate` sampled (a per-thread generator seeded from the OS).
bool sampled(double rate);

// The process id NVRTC wrote into the output's libcu++ internal names
// (_INTERNAL_..._<8 hex>_<pid>), if any: a replay pins it so the names keep their length.
std::optional<pid_t> output_pid(std::span<const std::byte> output);

// The first offset where `a` and `b` differ once each _INTERNAL_ name's module id and process id
// are zeroed (same length); nullopt when equal.
std::optional<std::size_t> first_difference(std::span<const std::byte> a,
                                            std::span<const std::byte> b);

// Writes a mismatch report (what a bug report needs) under $CUCORE_VERIFY_REPORTS, else
// ${TMPDIR:-/tmp}/cucore-verify-UID; returns its path, or nullopt when it cannot be written.
std::optional<std::filesystem::path> write_verify_report(std::string_view key_hex,
                                                         std::string_view text);

// SHA-256 of `bytes`, hex.
std::string digest_hex(std::span<const std::byte> bytes);

}  // namespace cucore::detail
