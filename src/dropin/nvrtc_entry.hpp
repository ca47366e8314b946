// The NVRTC drop-in's cache entry (docs/transparent-cache.md): every answer of a compiled program's
// getters (server/nvrtc_record.hpp), in the drop-ins' record format (dropin/recorded_output.hpp).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "server/nvrtc_record.hpp"

namespace cucore::dropin::nvrtc_entry {

std::vector<std::byte> serialize(const detail::nvrtc_record& record);
// Throws format_error on a damaged entry (a miss).
detail::nvrtc_record deserialize(std::span<const std::byte> data);

}  // namespace cucore::dropin::nvrtc_entry
