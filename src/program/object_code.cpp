#include "cucore/object_code.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/enum_names.hpp"
#include "common/text.hpp"
#include "cucore/error.hpp"

namespace cucore {
namespace {

std::vector<std::byte> to_bytes(std::span<const std::byte> data) {
  return std::vector<std::byte>(data.begin(), data.end());
}

}  // namespace

constexpr auto kCodeTypeNames = detail::name_each<code_type::tile_ir>(
    "ptx", "cubin", "ltoir", "fatbin", "object", "library", "tile_ir");

std::string_view to_string(code_type type) noexcept {
  return kCodeTypeNames(type);
}

code_type parse_code_type(std::string_view text) {
  // Case-insensitive, as parse_source_type: "CUBIN" and "cubin" are the same type.
  const std::string lowered = detail::lower_case(text);
  if (lowered == "tile-ir") return code_type::tile_ir;
  if (const auto type = kCodeTypeNames.find(lowered)) return *type;
  throw invalid_argument("unknown code type \"" + std::string(text) +
                         "\": use ptx, cubin, ltoir, fatbin, object, library or tile_ir");
}

object_code::object_code(code_type type, std::vector<std::byte> code, std::string name,
                         symbol_map symbols) {
  const std::size_t length = code.size();
  const std::byte* bytes = code.data();  // a vector's move keeps its heap block
  state_ = std::make_shared<const state>(state{
      type, std::move(code), nullptr, bytes, length, std::move(name), std::move(symbols), {}});
}

object_code::object_code(code_type type, std::vector<std::byte> buffer, std::size_t offset,
                         std::size_t length, std::string name, symbol_map symbols) {
  if (offset > buffer.size() || length > buffer.size() - offset) {
    throw invalid_argument("object_code range [" + std::to_string(offset) + ", +" +
                           std::to_string(length) + ") is outside its " +
                           std::to_string(buffer.size()) + "-byte buffer");
  }
  const std::byte* bytes = buffer.data() + offset;
  state_ = std::make_shared<const state>(state{
      type, std::move(buffer), nullptr, bytes, length, std::move(name), std::move(symbols), {}});
}

object_code::object_code(code_type type, detail::uninitialized_bytes buffer, std::size_t offset,
                         std::size_t length, std::string name, symbol_map symbols) {
  if (offset > buffer.size || length > buffer.size - offset) {
    throw invalid_argument("object_code range [" + std::to_string(offset) + ", +" +
                           std::to_string(length) + ") is outside its " +
                           std::to_string(buffer.size) + "-byte buffer");
  }
  const std::byte* bytes = buffer.data + offset;
  state_ = std::make_shared<const state>(state{
      type, {}, std::move(buffer.storage), bytes, length, std::move(name), std::move(symbols), {}});
}

object_code object_code::from_ptx(std::string_view ptx, std::string name, symbol_map symbols) {
  auto bytes = std::as_bytes(std::span<const char>(ptx.data(), ptx.size()));
  return object_code(code_type::ptx, to_bytes(bytes), std::move(name), std::move(symbols));
}

#define CUCORE_BINARY_FACTORY(kind)                                                           \
  object_code object_code::from_##kind(std::span<const std::byte> data, std::string name,     \
                                       symbol_map symbols) {                                  \
    return object_code(code_type::kind, to_bytes(data), std::move(name), std::move(symbols)); \
  }
CUCORE_BINARY_FACTORY(cubin)
CUCORE_BINARY_FACTORY(ltoir)
CUCORE_BINARY_FACTORY(fatbin)
CUCORE_BINARY_FACTORY(object)
CUCORE_BINARY_FACTORY(library)
#undef CUCORE_BINARY_FACTORY

object_code object_code::from_file(const std::string& path, code_type type, std::string name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("cannot read " + std::string(to_string(type)) + " file \"" + path + "\"");
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw error("error while reading \"" + path + "\"");
  std::vector<std::byte> bytes(raw.size());
  if (!raw.empty()) std::memcpy(bytes.data(), raw.data(), raw.size());
  return object_code(type, std::move(bytes), name.empty() ? path : std::move(name));
}

std::string_view object_code::text() const noexcept {
  auto c = code();
  return {reinterpret_cast<const char*>(c.data()), c.size()};
}

std::string_view object_code::symbol(std::string_view name_or_expression) const noexcept {
  auto it = state_->symbols.find(name_or_expression);
  return it != state_->symbols.end() ? std::string_view(it->second) : name_or_expression;
}

void object_code::write(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw error("cannot open \"" + path + "\" for writing");
  auto c = code();
  out.write(reinterpret_cast<const char*>(c.data()), static_cast<std::streamsize>(c.size()));
  out.close();
  if (!out) throw error("error while writing \"" + path + "\"");
}

std::optional<object_code> object_code::tile_ir() const {
  if (!tile_ir_) return std::nullopt;
  object_code ir = *this;
  ir.state_ = tile_ir_;
  ir.tile_ir_ = nullptr;
  return ir;
}

object_code object_code::with_tile_ir(const object_code& tile_ir) const {
  if (tile_ir.type() != code_type::tile_ir) {
    throw invalid_argument("with_tile_ir takes Tile IR (code_type::tile_ir), not " +
                           std::string(to_string(tile_ir.type())));
  }
  if (type() == code_type::tile_ir) {
    throw invalid_argument(
        "Tile IR cannot carry Tile IR alongside: attach it to PTX, cubin or LTO-IR");
  }
  object_code out = *this;
  out.tile_ir_ = tile_ir.state_;
  return out;
}

bool operator==(const object_code& a, const object_code& b) noexcept {
  auto same = [](const object_code::state& x, const object_code::state& y) {
    const std::span<const std::byte> cx(x.bytes, x.length);
    const std::span<const std::byte> cy(y.bytes, y.length);
    return x.type == y.type && std::equal(cx.begin(), cx.end(), cy.begin(), cy.end()) &&
           x.name == y.name && x.symbols == y.symbols;
  };
  if (a.state_ != b.state_ && !same(*a.state_, *b.state_)) return false;
  if (!a.tile_ir_ || !b.tile_ir_) return a.tile_ir_ == b.tile_ir_;
  return a.tile_ir_ == b.tile_ir_ || same(*a.tile_ir_, *b.tile_ir_);
}

}  // namespace cucore
