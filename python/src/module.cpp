// cucore._cucore: the nanobind extension behind `import cucore`.
//
// The GIL is released around everything that compiles or touches a cache (compiles take tens of
// milliseconds to seconds; a directory or SQLite hit does file I/O), and held only to convert
// arguments and results — and for in-memory reads, which cost less than releasing it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <utility>

#include "caches.hpp"
#include "cucore/error.hpp"
#include "cucore/toolkit.hpp"
#include "pack.hpp"
#include "program.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace cucore::python {
namespace {

// The exception classes, created once at import (module-lifetime references).
struct exception_types {
  PyObject* error = nullptr;             // cucore.Error(RuntimeError)
  PyObject* invalid_argument = nullptr;  // cucore.InvalidArgument(Error, ValueError)
  PyObject* extra_digest_required = nullptr;
  PyObject* compile_error = nullptr;
  PyObject* library_error = nullptr;
  PyObject* library_not_found = nullptr;
  PyObject* cuda_error = nullptr;
};
exception_types exceptions;

PyObject* new_exception(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("cucore.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::borrow(type);
  return type;
}

// Raises `type(message)` with extra attributes on the instance.
void raise(PyObject* type, const char* message,
           std::initializer_list<std::pair<const char*, nb::object>> attributes = {}) {
  nb::object instance = nb::borrow(type)(message);
  for (const auto& [name, value] : attributes) instance.attr(name) = value;
  PyErr_SetObject(type, instance.ptr());
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const compile_error& e) {
    raise(exceptions.compile_error, e.what(),
          {{"log", nb::str(e.log().c_str(), e.log().size())},
           {"backend", nb::str(e.backend().c_str())},
           {"status", nb::str(e.status().c_str())}});
  } catch (const extra_digest_required& e) {
    PyErr_SetString(exceptions.extra_digest_required, e.what());
  } catch (const invalid_argument& e) {
    PyErr_SetString(exceptions.invalid_argument, e.what());
  } catch (const library_not_found& e) {
    raise(exceptions.library_not_found, e.what(),
          {{"library", nb::str(e.library().c_str())},
           {"searched", nb::cast(e.searched())},
           {"feature", nb::str(e.feature().c_str())}});
  } catch (const library_error& e) {
    raise(exceptions.library_error, e.what(),
          {{"library", nb::str(e.library().c_str())},
           {"call", nb::str(e.call().c_str())},
           {"status", nb::str(e.status().c_str())}});
  } catch (const cuda_error& e) {
    raise(exceptions.cuda_error, e.what(),
          {{"result", nb::int_(e.result())},
           {"result_name", nb::str(e.result_name().c_str())},
           {"call", nb::str(e.call().c_str())}});
  } catch (const error& e) {
    PyErr_SetString(exceptions.error, e.what());
  }
}

void define_exceptions(nb::module_& m) {
  exceptions.error = new_exception(m, "Error", PyExc_RuntimeError, "Base of cucore's errors.");
  nb::tuple invalid_bases =
      nb::make_tuple(nb::handle(exceptions.error), nb::handle(PyExc_ValueError));
  exceptions.invalid_argument =
      new_exception(m, "InvalidArgument", invalid_bases.ptr(),
                    "An option, argument or combination cucore refuses (a ValueError).");
  exceptions.extra_digest_required =
      new_exception(m, "ExtraDigestRequired", exceptions.invalid_argument,
                    "The cache key cannot see an input the compile reads: pass extra_digest.");
  exceptions.compile_error =
      new_exception(m, "CompileError", exceptions.error,
                    "The compiler rejected the program; .log holds its full log.");
  exceptions.library_error =
      new_exception(m, "LibraryError", exceptions.error, "A compiler library call failed.");
  exceptions.library_not_found =
      new_exception(m, "LibraryNotFound", exceptions.error,
                    "A CUDA library could not be opened; .searched lists where cucore looked.");
  exceptions.cuda_error =
      new_exception(m, "CudaError", exceptions.error, "A CUDA driver call failed.");
  nb::register_exception_translator(translate);
}

}  // namespace
}  // namespace cucore::python

NB_MODULE(_cucore, m) {
  m.doc() = "cucore's native module: run-time CUDA compilation with a program cache.";
  cucore::python::define_exceptions(m);
  cucore::python::bind_object_code(m);
  cucore::python::bind_caches(m);
  cucore::python::bind_packs(m);
  cucore::python::bind_program(m);
  m.def("_add_wheel_directory", &cucore::toolkit::add_wheel_directory, "site_packages"_a,
        "Searches this site-packages directory for NVIDIA's CUDA 13 wheels (nvidia/cu13); "
        "cucore's __init__ registers sys.path's.");
}
