// The compiling classes of cucore._cucore: ObjectCode (compiled code and its symbol mapping),
// Program, and the cache key functions make_program_cache_key and explain_program_cache_key.
#include "program.hpp"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "convert.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace cucore::python {
namespace {

// The name expressions a compile was given (a tuple of str and bytes), kept on the ObjectCode it
// returned so its symbol mapping is keyed by the type given (cuda.core's rule): b"f<int>" maps as
// b"f<int>". The C++ object keeps text; an ObjectCode read from a cache keys by str.
constexpr const char* kGivenNames = "_cucore_name_expressions";

nb::object symbol_mapping_of(nb::handle self) {
  const auto& code = nb::cast<const object_code&>(self);
  std::set<std::string, std::less<>> as_bytes;
  std::set<std::string, std::less<>> as_text;
  nb::dict attributes = nb::borrow<nb::dict>(nb::getattr(self, "__dict__"));
  if (attributes.contains(kGivenNames)) {
    for (nb::handle name : attributes[kGivenNames]) {
      (PyBytes_Check(name.ptr()) ? as_bytes : as_text).insert(*bytes_of(name));
    }
  }
  nb::dict out;
  for (const auto& [name, mangled] : code.symbol_mapping()) {
    const bool bytes = as_bytes.contains(name);
    if (bytes) out[nb::bytes(name.data(), name.size())] = nb::str(mangled.c_str(), mangled.size());
    if (!bytes || as_text.contains(name)) {
      out[nb::str(name.c_str(), name.size())] = nb::str(mangled.c_str(), mangled.size());
    }
  }
  return out;
}

// `code` as returned to Python, remembering the name expressions when any was given as bytes.
nb::object returned(object_code code, const parsed_names& names) {
  nb::object out = nb::cast(std::move(code));
  if (!names.bytes.empty()) nb::getattr(out, "__dict__")[kGivenNames] = names.given;
  return out;
}

// --- programs and keys -----------------------------------------------------------------------

// A program and the lock that keeps one compile at a time on it (cucore::program is not meant to
// be compiled from two threads at once; with the GIL released, Python threads could).
struct py_program {
  program prog;
  std::mutex mutex;
};

// Reads a program's state after any compile in flight on another thread (which holds the mutex
// with the GIL released): waits without the GIL, copies, and converts once the GIL is back.
template <class F>
auto locked(py_program& p, F read) {
  nb::gil_scoped_release release;
  std::lock_guard lock(p.mutex);
  return read();
}

program_cache* cache_from(nb::handle cache) {
  if (cache.is_none()) return nullptr;
  if (nb::isinstance<program_cache>(cache)) return nb::cast<program_cache*>(cache);
  // cucore.cuda_core's wrappers for cuda.core carry the native cache.
  if (nb::object native = nb::getattr(cache, "native", nb::none());
      !native.is_none() && nb::isinstance<program_cache>(native)) {
    return nb::cast<program_cache*>(native);
  }
  throw nb::type_error(
      "cache must be a cucore cache (InMemoryProgramCache, SQLiteProgramCache, "
      "FileStreamProgramCache, or a cucore.cuda_core wrapper of one)");
}

// code_type as cuda.core takes it (case-insensitive), refused naming the parameter.
source_type code_type_arg(std::string_view text) {
  try {
    return parse_source_type(text);
  } catch (const invalid_argument&) {
    throw invalid_argument("code_type=\"" + std::string(text) +
                           "\" is not supported: use \"c++\", \"ptx\" or \"nvvm\"");
  }
}

// target_type as cuda.core takes it (case-insensitive), for `source`: one it compiles to, or an
// InvalidArgument (a ValueError) naming both parameters and the supported targets.
code_type target_type_arg(source_type source, std::string_view text) {
  const std::vector<code_type> targets = supported_targets(source);
  std::string list;
  for (code_type t : targets) list += (list.empty() ? "" : ", ") + std::string(to_string(t));
  std::optional<code_type> target;
  try {
    target = parse_code_type(text);
  } catch (const invalid_argument&) {
  }
  if (!target || std::find(targets.begin(), targets.end(), *target) == targets.end()) {
    throw invalid_argument("target_type=\"" + std::string(text) +
                           "\" is not valid for code_type=\"" + std::string(to_string(source)) +
                           "\" (supported: " + list + ")");
  }
  return *target;
}

// extra_digest as cuda.core takes it (any bytes-like: bytes, bytearray, memoryview), or a str
// (its UTF-8).
std::string extra_digest_from(nb::handle digest) {
  if (nb::isinstance<nb::str>(digest)) return nb::cast<std::string>(digest);
  if (PyObject_CheckBuffer(digest.ptr())) {
    nb::bytes data(nb::steal(PyBytes_FromObject(digest.ptr())));
    if (!data.is_valid()) throw nb::python_error();
    return std::string(data.c_str(), data.size());
  }
  throw nb::type_error(("extra_digest must be bytes-like, str or None, got " +
                        std::string(nb::inst_name(digest).c_str()))
                           .c_str());
}

program_cache_key key_from(nb::handle code, std::string_view code_type, nb::handle options,
                           std::string_view target_type, nb::handle name_expressions,
                           nb::handle extra_digest, nb::handle cache) {
  const source_type type = code_type_arg(code_type);
  program_cache_key_inputs in;
  in.target = target_type_arg(type, target_type);
  const std::string source = source_code(code, type);
  in.code = source;
  in.code_type = type;
  in.options = for_code_type(options_from(options), type);
  // Only NVRTC resolves name expressions: ptx and nvvm ignore them, unchecked (as cuda.core).
  if (type == source_type::cxx) {
    parsed_names names = name_expressions_from(name_expressions);
    in.name_expressions = std::move(names.text);
    in.byte_name_expressions = std::move(names.bytes);
  }
  if (!extra_digest.is_none()) in.extra_digest = extra_digest_from(extra_digest);
  program_cache* c = cache_from(cache);
  nb::gil_scoped_release release;  // the key may read and hash headers
  return make_program_cache_key(in, c ? compiler_probes_for(*c) : installed_compiler_probes());
}

// Defines `name`, a function of make_program_cache_key's keyword arguments (cuda.core's) that
// returns `answer(key)`: make_program_cache_key and explain_program_cache_key.
template <class Answer>
void def_key_function(nb::module_& m, const char* name, const char* signature, const char* doc,
                      Answer answer) {
  m.def(
      name,
      [answer](nb::handle code, std::string_view code_type, nb::handle options,
               std::string_view target_type, nb::handle name_expressions, nb::handle extra_digest,
               nb::handle cache) {
        return answer(
            key_from(code, code_type, options, target_type, name_expressions, extra_digest, cache));
      },
      nb::sig(signature), nb::kw_only(), "code"_a, "code_type"_a, "options"_a.none(),
      "target_type"_a, "name_expressions"_a = nb::tuple(), "extra_digest"_a = nb::none(),
      "cache"_a = nb::none(), doc);
}

nb::dict includes_dict(const include_report& r) {
  nb::dict d;
  d["tracked"] = r.tracked;
  d["files"] = r.files;
  d["absent"] = r.absent;
  d["in_memory"] = r.in_memory;
  d["hashed"] = r.hashed;
  d["reused_walk"] = r.reused_walk;
  d["stat_fast_path"] = r.stat_fast_path();
  d["vouched"] = nb::cast(r.vouched);
  return d;
}

}  // namespace

void bind_object_code(nb::module_& m) {
  nb::class_<object_code>(m, "ObjectCode",
                          "Compiled code: bytes, their type, a name and the symbol mapping "
                          "(name expression -> mangled name). Immutable.",
                          nb::dynamic_attr())
      .def(
          "__init__",
          [](object_code* self, nb::bytes code, std::string_view code_type, std::string name,
             std::optional<symbol_map> symbol_mapping) {
            auto bytes = std::as_bytes(std::span(code.c_str(), code.size()));
            new (self) object_code(parse_code_type(code_type),
                                   std::vector<std::byte>(bytes.begin(), bytes.end()),
                                   std::move(name), symbol_mapping.value_or(symbol_map{}));
          },
          "code"_a, "code_type"_a, "name"_a = "", "symbol_mapping"_a = nb::none())
      .def_prop_ro(
          "code", [](const object_code& c) { return to_bytes(c.code()); }, "The bytes (a copy).")
      .def_prop_ro("code_type",
                   [](const object_code& c) { return std::string(to_string(c.type())); })
      .def_prop_ro("name", &object_code::name)
      .def_prop_ro("tile_ir", &object_code::tile_ir,
                   "The Tile IR NVRTC made in the same compile as this PTX, cubin or LTO-IR (a "
                   "program with Tile code compiled with enable_tile), an ObjectCode of code_type "
                   "\"tile_ir\"; None when it made none.")
      .def_prop_ro("symbol_mapping", &symbol_mapping_of,
                   nb::sig("def symbol_mapping(self) -> dict[str | bytes, str]"),
                   "Name expression -> mangled name. A name expression the compile was given as "
                   "bytes is a bytes key, as in cuda.core.")
      .def(
          "symbol",
          [](const object_code& c, nb::handle name) {
            auto text = bytes_of(name);
            if (!text || PyByteArray_Check(name.ptr())) {
              throw nb::type_error(
                  ("symbol() takes str or bytes, got " + std::string(nb::inst_name(name).c_str()))
                      .c_str());
            }
            return std::string(c.symbol(*text));
          },
          nb::sig("def symbol(self, name_or_expression: str | bytes) -> str"),
          "name_or_expression"_a,
          "The mangled name of a name expression this code was compiled with, else the name.")
      .def(
          "__setattr__",
          [](nb::handle, nb::handle name, nb::handle) {
            throw nb::attribute_error(
                ("ObjectCode is immutable: cannot set " + nb::cast<std::string>(nb::str(name)))
                    .c_str());
          },
          nb::sig("def __setattr__(self, name: str, value: object, /) -> None"),
          "Raises AttributeError: an ObjectCode is immutable.")
      .def("__len__", &object_code::size)
      .def("__bytes__", [](const object_code& c) { return to_bytes(c.code()); })
      .def("__eq__",
           [](const object_code& a, nb::handle b) {
             return nb::isinstance<object_code>(b) && a == nb::cast<const object_code&>(b);
           })
      .def("__hash__",
           [](const object_code&) -> nb::int_ {
             throw nb::type_error("unhashable type: 'ObjectCode'");
           })
      .def("write", &object_code::write, "path"_a, nb::call_guard<nb::gil_scoped_release>(),
           "Writes the raw bytes to a file (for cuobjdump, nvdisasm).")
      .def("__repr__", [](const object_code& c) {
        return "<cucore.ObjectCode " + std::string(to_string(c.type())) + " " + c.name() + ", " +
               std::to_string(c.size()) + " bytes>";
      });
}

void bind_program(nb::module_& m) {
  nb::class_<py_program>(m, "Program",
                         "Source code, its type (\"c++\", \"ptx\", \"nvvm\") and options.")
      .def(
          "__init__",
          [](py_program* self, nb::handle code, std::string_view code_type, nb::handle options) {
            const source_type type = code_type_arg(code_type);
            new (self) py_program{
                program(source_code(code, type), type, for_code_type(options_from(options), type)),
                {}};
          },
          nb::sig("def __init__(self, code: str | bytes | bytearray, code_type: str, options: "
                  "cucore._options.ProgramOptions | typing.Any | None = None) -> None"),
          "code"_a, "code_type"_a, "options"_a = nb::none())
      .def(
          "compile",
          [](py_program& p, std::string_view target_type, nb::handle name_expressions,
             nb::handle cache) {
            const code_type target = target_type_arg(p.prog.type(), target_type);
            // Only NVRTC resolves name expressions: ptx and nvvm ignore them (as cuda.core).
            const parsed_names names = p.prog.type() == source_type::cxx
                                           ? name_expressions_from(name_expressions)
                                           : parsed_names{{}, {}, nb::tuple()};
            program_cache* c = cache_from(cache);
            std::optional<object_code> out;
            {
              nb::gil_scoped_release release;
              std::lock_guard lock(p.mutex);
              out = p.prog.compile(target, names.text, names.bytes, c);
            }
            return returned(std::move(*out), names);
          },
          nb::sig("def compile(self, target_type: str, name_expressions: "
                  "collections.abc.Iterable[str | bytes] = (), *, cache: ProgramCache | "
                  "typing.Any | None = None) -> ObjectCode"),
          "target_type"_a, "name_expressions"_a = nb::tuple(), nb::kw_only(),
          "cache"_a = nb::none(),
          "Compiles to \"ptx\", \"cubin\", \"ltoir\" or \"tile_ir\" (c++). With a cache: a hit "
          "returns the stored "
          "code (symbol mapping included), a miss compiles and stores. Raises CompileError with "
          "the log when the compiler rejects the code.")
      .def_prop_ro(
          "log", [](py_program& p) { return locked(p, [&] { return p.prog.log(); }); },
          "The log of the last compile.")
      .def_prop_ro("backend",
                   [](py_program& p) { return std::string(to_string(p.prog.backend())); })
      .def_prop_ro("code_type", [](py_program& p) { return std::string(to_string(p.prog.type())); })
      .def_prop_ro(
          "last_cache_outcome",
          [](py_program& p) {
            return std::string(to_string(locked(p, [&] { return p.prog.last_cache_outcome(); })));
          },
          "\"off\", \"hit\" or \"miss\": what the last compile found in its cache.")
      .def_prop_ro(
          "last_verify",
          [](py_program& p) {
            return std::string(to_string(locked(p, [&] { return p.prog.last_verify(); })));
          },
          "Verify mode (ProgramOptions.verify, CUCORE_VERIFY): \"not_verified\", \"verified\", "
          "\"mismatch\" (a stale hit caught: its entry removed, the fresh result returned) or "
          "\"queued\" (checked in the background: cucore.wait_for_verification()).")
      .def_prop_ro(
          "last_flight_outcome",
          [](py_program& p) -> std::optional<std::string> {
            const auto outcome = locked(p, [&] { return p.prog.last_flight_outcome(); });
            if (!outcome) return std::nullopt;
            return std::string(to_string(*outcome));
          },
          "What single-flight did on the last compile through a cache: \"hit\", \"compiled\", "
          "\"waited\" (another process or thread compiled it), \"took_over\", \"gave_up\" or "
          "\"unclaimed\"; None without a cache.")
      .def_prop_ro(
          "last_cache_key",
          [](py_program& p) -> std::optional<nb::bytes> {
            const auto key = locked(p, [&] { return p.prog.last_cache_key(); });
            if (!key) return std::nullopt;
            return to_bytes(key->bytes());
          },
          "The key of the last compile through a cache (bytes), or None.")
      .def_prop_ro(
          "last_cache_includes",
          [](py_program& p) -> std::optional<nb::dict> {
            const auto key = locked(p, [&] { return p.prog.last_cache_key(); });
            if (!key) return std::nullopt;
            return includes_dict(key->includes());
          },
          nb::sig("def last_cache_includes(self) -> dict[str, typing.Any] | None"),
          "What header tracking put into the last cache key: tracked, files, absent, in_memory, "
          "hashed, reused_walk, stat_fast_path, vouched; None without a cache.");

  def_key_function(
      m, "make_program_cache_key",
      "def make_program_cache_key(*, code: str | bytes | bytearray, code_type: str, options: "
      "cucore._options.ProgramOptions | typing.Any | "
      "None, target_type: str, name_expressions: collections.abc.Iterable[str | bytes] = (), "
      "extra_digest: bytes | bytearray | memoryview | str | None = None, cache: ProgramCache "
      "| None = None) -> bytes",
      "The 32-byte key of a compilation (cuda.core's signature; options may be cucore's or "
      "cuda.core's ProgramOptions). With `cache`, compiler versions come from its memo.",
      [](const program_cache_key& key) { return to_bytes(key.bytes()); });
  def_key_function(
      m, "explain_program_cache_key",
      "def explain_program_cache_key(*, code: str | bytes | bytearray, code_type: str, "
      "options: cucore._options.ProgramOptions | typing.Any | "
      "None, target_type: str, name_expressions: collections.abc.Iterable[str | bytes] = "
      "(), extra_digest: bytes | bytearray | memoryview | str | None = None, cache: "
      "ProgramCache | None = None) -> list[tuple[str, str]]",
      "The labelled fields that make_program_cache_key hashes, in order: (label, payload).",
      [](const program_cache_key& key) {
        std::vector<std::pair<std::string, std::string>> fields;
        for (const key_field& f : key.explain()) fields.emplace_back(f.label, f.payload);
        return fields;
      });
  m.def(
      "wait_for_verification", [] { cucore::wait_for_background_verification(); },
      nb::call_guard<nb::gil_scoped_release>(),
      "Waits until every cache hit queued for verification in the background (Program.last_verify "
      "\"queued\") has been checked; their findings are in the cache's stats and the log.");
}

}  // namespace cucore::python
