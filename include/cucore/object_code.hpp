// Compiled code: bytes plus what they are. Immutable, and cheap to copy (copies share the bytes),
// so caches can hand out the same object_code to many threads without copying.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cucore {

class kernel;

namespace detail {
// The driver library loaded from one object_code (cuLibraryLoadData; see runtime/kernel.hpp),
// created by the first get_kernel and shared by every copy of that object_code. Type-erased, so
// this header needs no CUDA header. Copying gives an empty slot: the state is only copied while it
// is being built, before anything was loaded.
struct loaded_library_slot {
  loaded_library_slot() = default;
  loaded_library_slot(const loaded_library_slot&) noexcept {}
  loaded_library_slot& operator=(const loaded_library_slot&) noexcept { return *this; }
  std::mutex mutex;
  std::shared_ptr<const void> library;
};

// Bytes allocated without being zero-filled, for a reader that overwrites them (a cache reading an
// entry file: zero-filling 256 KiB costs about as much as reading it), starting on a cache-line
// boundary (the kernel copies a file into a 16-byte aligned buffer, as malloc gives, up to ~1.6×
// slower on some CPUs). Over-allocated from plain new[] rather than aligned new, whose blocks
// glibc does not reuse for the next request of the same size (every read would go to cold memory).
// object_code adopts them without copying.
struct uninitialized_bytes {
  static constexpr std::size_t alignment = 64;
  explicit uninitialized_bytes(std::size_t n)
      : storage(  // n + alignment - 1 must not wrap around to a small block
            new std::byte[n <= SIZE_MAX - alignment ? n + alignment - 1 : throw std::bad_alloc()]),
        data(storage.get() +
             (alignment - reinterpret_cast<std::uintptr_t>(storage.get()) % alignment) % alignment),
        size(n) {}
  std::unique_ptr<std::byte[]> storage;
  std::byte* data;  // `size` bytes inside `storage`
  std::size_t size;
};
}  // namespace detail

// tile_ir: NVRTC's Tile IR (cuda_tile bytecode, NVRTC 13.1+), the code of a program's Tile
// functions
// (__tile_global__), which the PTX and cubin never hold.
enum class code_type { ptx, cubin, ltoir, fatbin, object, library, tile_ir };

std::string_view to_string(code_type type) noexcept;
// Parses "ptx", "cubin", "ltoir", "fatbin", "object", "library", "tile_ir" (also "tile-ir");
// throws invalid_argument otherwise.
code_type parse_code_type(std::string_view text);  // case-insensitive; throws invalid_argument

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
  // The same for a buffer that was never zero-filled; [offset, offset + length) must have been
  // written.
  object_code(code_type type, detail::uninitialized_bytes buffer, std::size_t offset,
              std::size_t length, std::string name = {}, symbol_map symbols = {});

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
    return std::span<const std::byte>(state_->bytes, state_->length);
  }
  // The bytes as text (meaningful for PTX).
  std::string_view text() const noexcept;
  std::size_t size() const noexcept { return state_->length; }
  const std::string& name() const noexcept { return state_->name; }
  const symbol_map& symbol_mapping() const noexcept { return state_->symbols; }

  // The symbol to look up in the module for `name_or_expression`: its mangled name when it is a
  // name expression this code was compiled with, else the name itself.
  std::string_view symbol(std::string_view name_or_expression) const noexcept;

  // The kernel `name_or_expression` (a name expression this code was compiled with, or a symbol
  // name). The first call loads the code into the driver (cuLibraryLoadData) once for this
  // object_code and all its copies; the library stays loaded while any kernel from it lives. Needs
  // a GPU (cuda_error / library_not_found without one); ptx, cubin and fatbin only
  // (invalid_argument otherwise). Defined with the runtime (runtime/kernel.hpp), which callers
  // include to use the result. Thread-safe.
  kernel get_kernel(std::string_view name_or_expression) const;

  // The Tile IR NVRTC made in the same compile as this PTX, cubin or LTO-IR: a C++ program with
  // Tile code (enable_tile, tile_only) holds its Tile functions only there. nullopt when the
  // compile made none (no Tile code enabled, simt_only, or no Tile function in the program). A
  // cached result carries it too (same cache entry).
  std::optional<object_code> tile_ir() const;
  // This code with `tile_ir` (of type code_type::tile_ir) alongside; both share their bytes with
  // the originals. Throws invalid_argument when `tile_ir` is not Tile IR or this code is.
  object_code with_tile_ir(const object_code& tile_ir) const;

  // Writes the raw bytes to `path` (for cuobjdump, nvdisasm, ...).
  void write(const std::string& path) const;

  // Same bytes, type, name, symbols and Tile IR alongside.
  friend bool operator==(const object_code& a, const object_code& b) noexcept;

 private:
  struct state {
    code_type type;
    // The bytes live in one of the two buffers; `bytes` points at the code inside it.
    std::vector<std::byte> buffer;
    std::unique_ptr<std::byte[]> raw;
    const std::byte* bytes;
    std::size_t length;
    std::string name;
    symbol_map symbols;
    // The driver library, loaded lazily by get_kernel, so all copies of one object_code load once.
    mutable detail::loaded_library_slot loaded;
  };
  std::shared_ptr<const state> state_;
  std::shared_ptr<const state> tile_ir_;  // the Tile IR alongside, or null
};

}  // namespace cucore
