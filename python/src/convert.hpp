// Conversions between Python values and cucore's C++ types, shared by the module's bindings.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
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

// Name expressions: any iterable of str (TypeError for anything else, bytes and bytearray
// included: cucore's symbol mapping is keyed by text).
std::vector<std::string> name_expressions_from(nb::handle names);

// A cache value: a cucore.ObjectCode; a cuda.core ObjectCode (anything with `code` and
// `code_type`; a path-backed one is read from its file now); or bytes, bytearray or memoryview,
// stored with a code type inferred from the bytes (see the .cpp).
object_code object_code_from(nb::handle value);

// Python bytes holding a copy of `bytes`.
nb::bytes to_bytes(std::span<const std::byte> bytes);

}  // namespace cucore::python
