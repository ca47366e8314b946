// The drop-ins' cache entries (docs/transparent-cache.md): a flat, length-prefixed record, and in
// it the recorded answers of a library's getter pairs (nvrtcGetPTXSize and nvrtcGetPTX, ...), from
// which a hit answers the program's getters as the real library would have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace cucore::detail::recorded {

// A flat record: fields appended in a fixed order, each a little-endian u64 length and its bytes;
// numbers as 8 bytes. reader throws format_error on anything short or malformed (a damaged cache
// entry is a miss).
class record_writer {
 public:
  explicit record_writer(std::string_view magic) { bytes(magic); }
  void number(std::int64_t value);
  void bytes(std::string_view data);
  void bytes(std::span<const std::byte> data) {
    bytes(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

struct format_error {};

class record_reader {
 public:
  record_reader(std::span<const std::byte> data, std::string_view magic);
  std::int64_t number();
  std::string_view bytes();
  bool done() const noexcept { return at_ == data_.size(); }

 private:
  std::uint64_t u64();
  std::span<const std::byte> data_;
  std::size_t at_ = 0;
};

// One getter pair's answers: the size getter's result code and size, the getter's result code and
// bytes. Result is the library's result enum; its success is 0 (NVRTC_SUCCESS, NVVM_SUCCESS,
// NVJITLINK_SUCCESS). The functions below take any struct of these four fields
// (server/nvrtc_record.hpp's nvrtc_output too).
template <class Result>
struct recorded_output {
  Result size_code{};
  std::size_t size = 0;
  Result get_code{};
  std::string bytes;
};

// Asks `handle`'s size getter, then its getter into a buffer one byte longer (some write a NUL
// past the size they report). A failed size getter's code is the getter's answer too. Output:
// recorded_output of the size getter's result type unless given.
template <class Output = void, class Handle, class Size, class Get>
auto record_output(Handle handle, Size get_size, Get get) {
  using result = std::invoke_result_t<Size, Handle, std::size_t*>;
  std::conditional_t<std::is_void_v<Output>, recorded_output<result>, Output> o;
  o.size_code = get_size(handle, &o.size);
  if (o.size_code != result{}) {
    o.size = 0;
    o.get_code = o.size_code;
    return o;
  }
  std::string buffer(o.size + 1, '\0');
  o.get_code = get(handle, buffer.data());
  if (o.get_code == result{}) o.bytes = buffer.substr(0, o.size);
  return o;
}

// The size getter's answer from a record.
template <class Output>
auto answer_size(const Output& o, std::size_t* size) noexcept {
  if (o.size_code == decltype(o.size_code){}) *size = o.size;
  return o.size_code;
}

// The getter's answer from a record.
template <class Output>
auto answer_bytes(const Output& o, void* out) noexcept {
  if (o.get_code == decltype(o.get_code){}) std::memcpy(out, o.bytes.data(), o.bytes.size());
  return o.get_code;
}

template <class Output>
void write_output(record_writer& w, const Output& o) {
  w.number(o.size_code);
  w.number(static_cast<std::int64_t>(o.size));
  w.number(o.get_code);
  w.bytes(o.bytes);
}

// `code` makes a result code of the number read (and may refuse it: format_error).
template <class Output, class Code>
Output read_output(record_reader& r, Code code) {
  Output o;
  o.size_code = code(r.number());
  o.size = static_cast<std::size_t>(r.number());
  o.get_code = code(r.number());
  o.bytes = std::string(r.bytes());
  if (o.get_code == decltype(o.get_code){} && o.bytes.size() != o.size) throw format_error{};
  return o;
}

}  // namespace cucore::detail::recorded
