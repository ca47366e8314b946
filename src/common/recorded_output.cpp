#include "common/recorded_output.hpp"

namespace cucore::detail::recorded {

void record_writer::number(std::int64_t value) {
  const auto v = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
}

void record_writer::bytes(std::string_view data) {
  number(static_cast<std::int64_t>(data.size()));
  const auto* p = reinterpret_cast<const std::byte*>(data.data());
  out_.insert(out_.end(), p, p + data.size());
}

record_reader::record_reader(std::span<const std::byte> data, std::string_view magic)
    : data_(data) {
  if (bytes() != magic) throw format_error{};
}

std::uint64_t record_reader::u64() {
  if (data_.size() - at_ < 8) throw format_error{};
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(data_[at_ + i]) << (8 * i);
  at_ += 8;
  return v;
}

std::int64_t record_reader::number() {
  return static_cast<std::int64_t>(u64());
}

std::string_view record_reader::bytes() {
  const std::uint64_t n = u64();
  if (n > data_.size() - at_) throw format_error{};
  std::string_view out(reinterpret_cast<const char*>(data_.data() + at_), n);
  at_ += n;
  return out;
}

}  // namespace cucore::detail::recorded
