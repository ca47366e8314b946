// Compiled code: bytes plus what they are. Immutable, and cheap to copy (copies share the bytes),
// so caches can hand out the same object_code to many threads without copying.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cucore {

enum class code_type { ptx, cubin, ltoir, fatbin, object, library };

std::string_view to_string(code_type type) noexcept;
// Parses "ptx", "cubin", "ltoir", "fatbin", "object", "library"; throws invalid_argument otherwise.
code_type parse_code_type(std::string_view text);

// Name expression (as given to compile) → lowered (mangled) name.
using symbol_map = std::map<std::string, std::string, std::less<>>;

class object_code {
 public:
  object_code(code_type type, std::vector<std::byte> code, std::string name = {},
              symbol_map symbols = {});
  // Adopts `buffer` without copying; the code is buffer[offset, offset + length). Lets a cache hand
  // over the file it read, header and all, instead of copying the payload out of it. Throws
  // invalid_argument when the range is outside the buffer.
  object_code(code_type type, std::vector<std::byte> buffer, std::size_t offset, std::size_t length,
              std::string name = {}, symbol_map symbols = {});

  static object_code from_ptx(std::string_view ptx, std::string name = {}, symbol_map symbols = {});
  static object_code from_cubin(std::span<const std::byte> cubin, std::string name = {},
                                symbol_map symbols = {});
  static object_code from_ltoir(std::span<const std::byte> ltoir, std::string name = {},
                                symbol_map symbols = {});
  static object_code from_fatbin(std::span<const std::byte> fatbin, std::string name = {},
                                 symbol_map symbols = {});
  static object_code from_object(std::span<const std::byte> object, std::string name = {},
                                 symbol_map symbols = {});
  static object_code from_library(std::span<const std::byte> library, std::string name = {},
                                  symbol_map symbols = {});
  // Reads a file; throws cucore::error naming the path when it cannot be read.
  static object_code from_file(const std::string& path, code_type type, std::string name = {});

  code_type type() const noexcept { return state_->type; }
  std::span<const std::byte> code() const noexcept {
    return std::span<const std::byte>(state_->buffer).subspan(state_->offset, state_->length);
  }
  // The bytes as text (meaningful for PTX).
  std::string_view text() const noexcept;
  std::size_t size() const noexcept { return state_->length; }
  const std::string& name() const noexcept { return state_->name; }
  const symbol_map& symbol_mapping() const noexcept { return state_->symbols; }

  // The symbol to look up in the module for `name_or_expression`: its mangled name when it is a
  // name expression this code was compiled with, else the name itself.
  std::string_view symbol(std::string_view name_or_expression) const noexcept;

  // Writes the raw bytes to `path` (for cuobjdump, nvdisasm, ...).
  void write(const std::string& path) const;

  // Same bytes, type, name and symbols.
  friend bool operator==(const object_code& a, const object_code& b) noexcept;

 private:
  struct state {
    code_type type;
    std::vector<std::byte> buffer;
    std::size_t offset;
    std::size_t length;
    std::string name;
    symbol_map symbols;
    // Loading into the driver (cuLibraryLoadData) will hang a lazily created, shared library
    // handle here, so all copies of one object_code load once.
  };
  std::shared_ptr<const state> state_;
};

}  // namespace cucore
