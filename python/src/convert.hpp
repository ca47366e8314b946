// Conversions between Python values and cucore's C++ types, shared by the module's bindings.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cucore/object_code.hpp"
#include "cucore/options.hpp"

namespace cucore::python {

namespace nb = nanobind;

// A cache key as cuda.core takes it: bytes or bytearray as is, str as UTF-8. Anything else is a
// TypeError naming the type.
std::string key_bytes(nb::handle key);

// Source code: str for c++ and ptx; str, bytes or bytearray for nvvm (TypeError otherwise).
std::string source_code(nb::handle code, source_type type);

// The program_options read from any object with cuda.core's ProgramOptions attribute names
// (cucore.ProgramOptions, cuda.core.ProgramOptions, a SimpleNamespace): a missing or None attribute
// is unset. None gives the defaults.
program_options options_from(nb::handle options);

// Name expressions as cuda.core takes them: any iterable of str or bytes. A str is its UTF-8 text,
// a bytes its bytes; the two are kept apart (cuda.core keys its symbol mapping by the object given,
// so "f" and b"f" are different compiles to it, and different cache keys). bytearray (unhashable:
// cannot key a symbol mapping) and anything else are a TypeError naming the element's type.
struct parsed_names {
  std::vector<std::string> text;   // from str
  std::vector<std::string> bytes;  // from bytes
  nb::tuple given;                 // the elements as given, in order
};
parsed_names name_expressions_from(nb::handle names);

// The options a backend takes, as cuda.core's Program uses them: for ptx only the linker's fields
// (name, arch, debug, lineinfo, ptxas_options, max_register_count, ftz, prec_sqrt, prec_div, fma,
// link_time_optimization, time, split_compile, no_cache, numba_debug; extra_sources stays, to be
// refused); for c++ all but use_libdevice (NVVM's). The rest are ignored, so neither the compile
// nor the key sees them. nvvm options are kept: NVVM refuses what it does not take, as in
// cuda.core.
program_options for_code_type(const program_options& options, source_type type);

// Bytes of a str (UTF-8), bytes or bytearray, or nullopt for anything else.
std::optional<std::string> bytes_of(nb::handle value);

// A cache value: a cucore.ObjectCode; a cuda.core ObjectCode (anything with `code` and
// `code_type`, its name and symbol mapping kept; a path-backed one is read from its file now, and
// a missing file is a FileNotFoundError, as in cuda.core); or bytes, bytearray or memoryview,
// stored with a code type inferred from the bytes (see the .cpp).
object_code object_code_from(nb::handle value);

// Python bytes holding a copy of `bytes`.
nb::bytes to_bytes(std::span<const std::byte> bytes);

// A report's counts as the dict[str, int] the bindings return, in the order given.
nb::dict counts_dict(std::initializer_list<std::pair<const char*, std::uint64_t>> counts);

// What `call` returns, called with the GIL released: for library calls that do no Python and may
// take long (disk, network), so that other Python threads run meanwhile.
template <class Call>
auto without_gil(Call&& call) {
  nb::gil_scoped_release release;
  return call();
}

}  // namespace cucore::python
