#include "dropin/nvrtc_entry.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "common/recorded_output.hpp"
#include "dropin/support.hpp"

namespace cucore::dropin::nvrtc_entry {
namespace {

using output = detail::nvrtc_output;
static_assert(NVRTC_SUCCESS == 0);  // what dropin::recorded_output takes for success

constexpr std::string_view kEntryMagic = "cucore-dropin-nvrtc-entry-1";

// A result code read from an entry: nvrtcResult cannot hold a value past its range (0..31, the
// smallest bit-field that holds CUDA 13's 0..17) without undefined behaviour, so a damaged
// entry's is a format error (a miss).
nvrtcResult result_code(std::int64_t value) {
  static_assert(NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED <= 31);
  if (value < 0 || value > 31) throw format_error{};
  return static_cast<nvrtcResult>(value);
}

}  // namespace

std::vector<std::byte> serialize(const detail::nvrtc_record& res) {
  record_writer w(kEntryMagic);
  for (const output* o : {&res.ptx, &res.cubin, &res.ltoir, &res.optix, &res.log}) {
    write_output(w, *o);
  }
  w.number(static_cast<std::int64_t>(res.names.size()));
  for (const auto& n : res.names) {
    w.bytes(n.expression);
    w.number(n.code);
    w.bytes(n.name);
  }
  w.number(res.unknown_name_code);
  w.number(res.add_after_code);
  w.number(res.pch_status);
  w.number(res.pch_required_code);
  w.number(static_cast<std::int64_t>(res.pch_required));
  // Appended, so that a record without it (an older drop-in's) still reads.
  if (res.tile) write_output(w, *res.tile);
  return w.take();
}

detail::nvrtc_record deserialize(std::span<const std::byte> data) {
  record_reader r(data, kEntryMagic);
  detail::nvrtc_record res;
  for (output* o : {&res.ptx, &res.cubin, &res.ltoir, &res.optix, &res.log}) {
    *o = read_output<output>(r, result_code);
  }
  const auto count = r.number();
  if (count < 0 || count > 1'000'000) throw format_error{};
  for (std::int64_t i = 0; i < count; ++i) {
    detail::nvrtc_lowered_name n;
    n.expression = std::string(r.bytes());
    n.code = result_code(r.number());
    n.name = std::string(r.bytes());
    res.names.push_back(std::move(n));
  }
  res.unknown_name_code = result_code(r.number());
  res.add_after_code = result_code(r.number());
  res.pch_status = result_code(r.number());
  res.pch_required_code = result_code(r.number());
  res.pch_required = static_cast<std::size_t>(r.number());
  if (!r.done()) res.tile = read_output<output>(r, result_code);
  if (!r.done()) throw format_error{};
  return res;
}

}  // namespace cucore::dropin::nvrtc_entry
