#include "convert.hpp"

#include <nanobind/stl/string.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "cucore/error.hpp"
#include "program/nvrtc_option_table.hpp"

namespace cucore::python {

namespace {

std::string py_type_name(nb::handle value) {
  return nb::cast<std::string>(
      nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(value.ptr()))).attr("__name__"));
}

[[noreturn]] void type_error(const std::string& message) {
  throw nb::type_error(message.c_str());
}

// The attribute, or None when it is missing (cuda.core's ProgramOptions has no cucore-only fields).
nb::object field(nb::handle options, const char* name) {
  return nb::getattr(options, name, nb::none());
}

std::string text_of(nb::handle value, const char* what) {
  if (!nb::isinstance<nb::str>(value)) {
    type_error(std::string(what) + " must be str, got " + py_type_name(value));
  }
  return nb::cast<std::string>(value);
}

// os.fspath for path-like values (include_path, pre_include), else the value itself.
nb::object fspath(nb::handle value) {
  if (nb::isinstance<nb::str>(value) || nb::isinstance<nb::bytes>(value)) {
    return nb::borrow(value);
  }
  if (nb::hasattr(value, "__fspath__")) return value.attr("__fspath__")();
  return nb::borrow(value);
}

void read_bool(nb::handle options, const char* name, std::optional<bool>& out) {
  nb::object v = field(options, name);
  if (v.is_none()) return;
  if (!nb::isinstance<nb::bool_>(v)) {
    type_error(std::string("ProgramOptions.") + name + " must be bool or None, got " +
               py_type_name(v));
  }
  out = nb::cast<bool>(v);
}

void read_int(nb::handle options, const char* name, std::optional<int>& out) {
  nb::object v = field(options, name);
  if (v.is_none()) return;
  if (!nb::isinstance<nb::int_>(v) || nb::isinstance<nb::bool_>(v)) {
    type_error(std::string("ProgramOptions.") + name + " must be int or None, got " +
               py_type_name(v));
  }
  out = nb::cast<int>(v);
}

// A string option. False means unset (NVRTC has no use for --std=False).
void read_string(nb::handle options, const char* name, std::optional<std::string>& out) {
  nb::object v = field(options, name);
  if (v.is_none() || (nb::isinstance<nb::bool_>(v) && !nb::cast<bool>(v))) return;
  out = text_of(fspath(v), (std::string("ProgramOptions.") + name).c_str());
}

// A file an option names (time, create_pch, use_pch, pch_dir, fdevice_time_trace). As in
// cuda.core, any value but None sets it and a bool is its text: time=True and time=False are
// --time=True and --time=False for NVRTC (a file of that name: a side effect the key refuses), and
// -time for the PTX linker, which only asks whether the option is set.
void read_path(nb::handle options, const char* name, std::optional<std::string>& out) {
  nb::object v = field(options, name);
  if (v.is_none()) return;
  if (nb::isinstance<nb::bool_>(v)) {
    out = nb::cast<bool>(v) ? "True" : "False";
    return;
  }
  out = text_of(fspath(v), (std::string("ProgramOptions.") + name).c_str());
}

// `one(value)` when `single(value)`, else `one` for each element of it: cuda.core takes one value
// or a sequence of them.
template <class Single, class One>
void one_or_each(nb::handle value, Single single, One one) {
  if (single(value)) {
    one(value);
    return;
  }
  for (nb::handle item : nb::iter(value)) one(item);
}

// A str or an iterable of str (a tuple, a list, range(0), ...). False means empty.
void read_strings(nb::handle options, const char* name, std::vector<std::string>& out) {
  nb::object v = field(options, name);
  if (v.is_none() || (nb::isinstance<nb::bool_>(v) && !nb::cast<bool>(v))) return;
  const std::string what = std::string("ProgramOptions.") + name;
  v = fspath(v);
  if (nb::isinstance<nb::bytes>(v)) type_error(what + " must be str or a sequence of str");
  one_or_each(
      v, [](nb::handle x) { return nb::isinstance<nb::str>(x); },
      [&](nb::handle item) { out.push_back(text_of(fspath(item), what.c_str())); });
}

void read_ints(nb::handle options, const char* name, std::vector<int>& out) {
  nb::object v = field(options, name);
  if (v.is_none()) return;
  const std::string what = std::string("ProgramOptions.") + name;
  auto one = [&](nb::handle item) {
    if (!nb::isinstance<nb::int_>(item) || nb::isinstance<nb::bool_>(item)) {
      type_error(what + " must be int or a sequence of int, got " + py_type_name(item));
    }
    out.push_back(nb::cast<int>(item));
  };
  one_or_each(
      v, [](nb::handle x) { return nb::isinstance<nb::int_>(x); }, one);
}

// cuda.core's forms: "N", ("N", "V"), or a list/tuple of those.
void read_macros(nb::handle options, std::vector<macro>& out) {
  nb::object v = field(options, "define_macro");
  if (v.is_none()) return;
  auto is_pair = [](nb::handle item) {
    return nb::isinstance<nb::tuple>(item) && nb::len(item) == 2 &&
           nb::isinstance<nb::str>(item[0]) && nb::isinstance<nb::str>(item[1]);
  };
  auto one = [&](nb::handle item) {
    if (nb::isinstance<nb::str>(item)) {
      out.emplace_back(nb::cast<std::string>(item));
    } else if (is_pair(item)) {
      out.emplace_back(nb::cast<std::string>(item[0]), nb::cast<std::string>(item[1]));
    } else {
      type_error("ProgramOptions.define_macro entries must be str or (str, str), got " +
                 py_type_name(item));
    }
  };
  one_or_each(
      v, [&](nb::handle x) { return nb::isinstance<nb::str>(x) || is_pair(x); }, one);
}

// cucore's in-memory headers: a mapping name -> contents, or pairs.
void read_headers(nb::handle options, std::vector<include_header>& out) {
  nb::object v = field(options, "headers");
  if (v.is_none()) return;
  nb::object items = nb::hasattr(v, "items") ? v.attr("items")() : nb::borrow(v);
  for (nb::handle item : nb::iter(items)) {
    if (nb::len(item) != 2) type_error("ProgramOptions.headers entries must be (name, contents)");
    out.push_back({text_of(item[0], "a header name"), text_of(item[1], "a header's contents")});
  }
}

void read_extra_sources(nb::handle options, std::vector<nvvm_module>& out) {
  nb::object v = field(options, "extra_sources");
  if (v.is_none()) return;
  for (nb::handle item : nb::iter(v)) {
    if (!nb::isinstance<nb::tuple>(item) || nb::len(item) != 2) {
      type_error("ProgramOptions.extra_sources entries must be (name, code) tuples");
    }
    auto code = bytes_of(item[1]);
    if (!code) type_error("an extra source's code must be str, bytes or bytearray");
    out.push_back({text_of(item[0], "an extra source's name"), std::move(*code)});
  }
}

// Where a c++ miss compiles: "off", "on" or "auto" (case-insensitive, as CUCORE_COMPILE_SERVER),
// or None (the variable, else off). Any other word is an InvalidArgument (a ValueError).
void read_compile_server(nb::handle options, std::optional<compile_server_mode>& out) {
  nb::object v = field(options, "compile_server");
  if (v.is_none()) return;
  if (!nb::isinstance<nb::str>(v)) {
    type_error("ProgramOptions.compile_server must be str or None, got " + py_type_name(v));
  }
  const std::string text = nb::cast<std::string>(v);
  try {
    out = parse_compile_server_mode(text);
  } catch (const invalid_argument&) {
    throw invalid_argument(
        "ProgramOptions.compile_server must be \"off\", \"on\" or \"auto\" "
        "(case-insensitive) or None, got \"" +
        text + "\"");
  }
}

// Verify mode's rate: a number from 0 to 1, or None (CUCORE_VERIFY, else 0).
void read_verify(nb::handle options, std::optional<double>& out) {
  nb::object v = field(options, "verify");
  if (v.is_none()) return;
  if (nb::isinstance<nb::bool_>(v) ||
      !(nb::isinstance<nb::float_>(v) || nb::isinstance<nb::int_>(v))) {
    type_error("ProgramOptions.verify must be a number from 0 to 1 or None, got " +
               py_type_name(v));
  }
  const double rate = nb::cast<double>(v);
  if (!(rate >= 0.0 && rate <= 1.0)) {
    throw invalid_argument(
        "ProgramOptions.verify must be from 0 to 1 (the fraction of cache hits "
        "compiled again and compared), got " +
        std::to_string(rate));
  }
  out = rate;
}

// A field whose value has a form of its own (option_form::custom).
void read_custom(nb::handle options, std::string_view name, program_options& out) {
  if (name == "define_macro") {
    read_macros(options, out.define_macro);
  } else if (name == "headers") {
    read_headers(options, out.headers);
  } else if (name == "compile_server") {  // both its rows (--server, --no-server): one answer
    read_compile_server(options, out.compile_server);
  } else if (name == "extra_sources") {
    read_extra_sources(options, out.extra_sources);
  } else {
    throw std::logic_error("no reading of ProgramOptions." + std::string(name));
  }
}

}  // namespace

std::optional<std::string> bytes_of(nb::handle value) {
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  if (PyBytes_Check(value.ptr())) {
    return std::string(PyBytes_AS_STRING(value.ptr()),
                       static_cast<std::size_t>(PyBytes_GET_SIZE(value.ptr())));
  }
  if (PyByteArray_Check(value.ptr())) {
    return std::string(PyByteArray_AS_STRING(value.ptr()),
                       static_cast<std::size_t>(PyByteArray_GET_SIZE(value.ptr())));
  }
  return std::nullopt;
}

std::string key_bytes(nb::handle key) {
  if (nb::isinstance<nb::str>(key) || PyBytes_Check(key.ptr()) || PyByteArray_Check(key.ptr())) {
    return *bytes_of(key);
  }
  type_error("cache keys must be bytes or str, got " + py_type_name(key));
}

std::string source_code(nb::handle code, source_type type) {
  if (type != source_type::nvvm && !nb::isinstance<nb::str>(code)) {
    type_error("code must be str for code_type \"" + std::string(to_string(type)) + "\", got " +
               py_type_name(code));
  }
  auto bytes = bytes_of(code);
  if (!bytes) type_error("code must be str, bytes or bytearray, got " + py_type_name(code));
  return std::move(*bytes);
}

program_options options_from(nb::handle o) {
  program_options p;
  if (o.is_none()) return p;
  if (nb::object name = field(o, "name"); !name.is_none()) p.name = text_of(name, "options.name");
  read_string(o, "arch", p.arch);
  // The fields the command line sets too, read by the forms of the table both read through.
  using enum detail::option_form;
  for (const auto& f : detail::program_option_fields) {
    const std::string attribute(f.name);
    const char* name = attribute.c_str();
    switch (f.form) {
      case heading:
        break;
      case flag:
      case off_flag:
      case boolean:
      case on_off:
        read_bool(o, name, detail::field_member<std::optional<bool>>(p, f));
        break;
      case integer:
        read_int(o, name, detail::field_member<std::optional<int>>(p, f));
        break;
      case integers:
        read_ints(o, name, detail::field_member<std::vector<int>>(p, f));
        break;
      case text:
        read_string(o, name, detail::field_member<std::optional<std::string>>(p, f));
        break;
      case path:
        read_path(o, name, detail::field_member<std::optional<std::string>>(p, f));
        break;
      case texts:
        read_strings(o, name, detail::field_member<std::vector<std::string>>(p, f));
        break;
      case custom:
        read_custom(o, f.name, p);
        break;
    }
  }
  read_verify(o, p.verify);
  read_bool(o, "verify_in_background", p.verify_in_background);
  return p;
}

parsed_names name_expressions_from(nb::handle names) {
  parsed_names out;
  if (names.is_none()) {
    out.given = nb::tuple();
    return out;
  }
  nb::list given;
  for (nb::handle item : nb::iter(names)) {
    if (nb::isinstance<nb::str>(item)) {
      out.text.push_back(nb::cast<std::string>(item));
    } else if (PyBytes_Check(item.ptr())) {
      out.bytes.push_back(*bytes_of(item));
    } else if (PyByteArray_Check(item.ptr())) {
      type_error(
          "name_expressions elements must be str or bytes; bytearray is not accepted (it is "
          "unhashable, so it cannot key the symbol mapping): pass bytes(...) or str");
    } else {
      type_error("name_expressions elements must be str or bytes, got " + py_type_name(item));
    }
    given.append(item);
  }
  out.given = nb::tuple(given);
  return out;
}

program_options for_code_type(const program_options& o, source_type type) {
  if (type == source_type::cxx) {
    program_options out = o;
    out.use_libdevice.reset();
    return out;
  }
  if (type != source_type::ptx) return o;
  program_options l;
  l.name = o.name;
  l.arch = o.arch;
  l.debug = o.debug;
  l.lineinfo = o.lineinfo;
  l.ptxas_options = o.ptxas_options;
  l.max_register_count = o.max_register_count;
  l.ftz = o.ftz;
  l.prec_sqrt = o.prec_sqrt;
  l.prec_div = o.prec_div;
  l.fma = o.fma;
  l.link_time_optimization = o.link_time_optimization;
  l.time = o.time;
  l.split_compile = o.split_compile;
  l.no_cache = o.no_cache;
  l.numba_debug = o.numba_debug;
  l.extra_sources = o.extra_sources;  // refused for ptx, as in cuda.core
  return l;
}

namespace {

// What raw bytes most likely are, by their magic: the type is metadata for `cucore cache ls`;
// a bytes-in/bytes-out caller gets the same bytes back whatever it is.
code_type sniff(std::string_view bytes) {
  if (bytes.starts_with("\x7f"
                        "ELF"))
    return code_type::cubin;
  if (bytes.starts_with("\x50\xed\x55\xba")) return code_type::fatbin;  // fatbin magic 0xba55ed50
  if (bytes.find('\0') == std::string_view::npos) return code_type::ptx;
  return code_type::ltoir;
}

// The bytes of a path-backed cuda.core ObjectCode's file, read as cuda.core reads it: a missing
// file is a FileNotFoundError naming it (cuda.core's words); other OSErrors pass as they are.
nb::object read_path_backed(nb::handle path) {
  try {
    return nb::module_::import_("pathlib").attr("Path")(path).attr("read_bytes")();
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_FileNotFoundError)) throw;
  }
  const std::string message =
      "cannot store path-backed ObjectCode in cache: " + nb::cast<std::string>(path) +
      " no longer exists";
  PyErr_SetString(PyExc_FileNotFoundError, message.c_str());
  throw nb::python_error();
}

}  // namespace

object_code object_code_from(nb::handle value) {
  if (nb::isinstance<object_code>(value)) return nb::cast<object_code>(value);
  if (nb::hasattr(value, "code") && nb::hasattr(value, "code_type")) {
    // A cuda.core ObjectCode: keep its type, name and symbol mapping.
    const code_type type = parse_code_type(nb::cast<std::string>(nb::str(value.attr("code_type"))));
    nb::object name_attr = nb::getattr(value, "name", nb::none());
    std::string name =
        name_attr.is_none() ? std::string() : nb::cast<std::string>(nb::str(name_attr));
    symbol_map symbols;
    nb::object mapping = nb::getattr(value, "symbol_mapping", nb::none());
    if (!mapping.is_none()) {
      for (nb::handle item : nb::iter(mapping.attr("items")())) {
        auto k = bytes_of(item[0]);
        auto v = bytes_of(item[1]);
        if (k && v) symbols.emplace(std::move(*k), std::move(*v));
      }
    }
    nb::object code = value.attr("code");
    if (nb::isinstance<nb::str>(code)) {  // path-backed: store the file's bytes, not the path
      code = read_path_backed(code);
    }
    nb::bytes data(nb::steal(PyBytes_FromObject(code.ptr())));
    if (!data.is_valid()) throw nb::python_error();
    auto bytes = std::as_bytes(std::span(data.c_str(), data.size()));
    return object_code(type, std::vector<std::byte>(bytes.begin(), bytes.end()), std::move(name),
                       std::move(symbols));
  }
  if (PyBytes_Check(value.ptr()) || PyByteArray_Check(value.ptr()) ||
      PyMemoryView_Check(value.ptr())) {
    nb::bytes data(nb::steal(PyBytes_FromObject(value.ptr())));
    if (!data.is_valid()) throw nb::python_error();
    std::string_view view(data.c_str(), data.size());
    auto bytes = std::as_bytes(std::span(view.data(), view.size()));
    return object_code(sniff(view), std::vector<std::byte>(bytes.begin(), bytes.end()));
  }
  type_error("cache values must be bytes-like or ObjectCode, got " + py_type_name(value));
}

nb::bytes to_bytes(std::span<const std::byte> bytes) {
  return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

nb::dict counts_dict(std::initializer_list<std::pair<const char*, std::uint64_t>> counts) {
  nb::dict d;
  for (const auto& [name, count] : counts) d[name] = count;
  return d;
}

}  // namespace cucore::python
