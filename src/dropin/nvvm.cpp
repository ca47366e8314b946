// The drop-in libnvvm.so.4 of `cucore run` (docs/transparent-cache.md): libNVVM's exported API
// (unversioned, as the real library's), every call forwarded to the real library, and
// nvvmCompileProgram answered from cucore's program cache.
//
// Modules are forwarded as they come (the real library checks them) and recorded beside the real
// handle: eager or lazy, name, bytes. A compile makes a key of the options, every module, and the
// real library's identity; a miss compiles with the real library and stores the result and the log
// (each getter's return code); a hit answers the getters from the entry.
#include <nvvm.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/sha256.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/single_flight.hpp"
#include "dropin/support.hpp"
#include "key/compiler_environment.hpp"
#include "key/observation_gate.hpp"
#include "loader/libraries.hpp"
#include "observe/compiler_observer.hpp"

#define CUCORE_EXPORT extern "C" __attribute__((visibility("default")))
#ifndef CUCORE_DROPIN_MAJOR
#define CUCORE_DROPIN_MAJOR 13  // the CUDA major of the real library (src/dropin/CMakeLists.txt)
#endif

namespace {

using namespace cucore;

struct real_nvvm {
  const detail::nvvm_api* api = nullptr;
  nvvmResult (*DisableConcurrentAPI)() = nullptr;
  void* (*Handle)(int) = nullptr;
  void* (*HandleTarget)(int, bool) = nullptr;
  std::int64_t file_size = 0;
};

const real_nvvm* load_real() noexcept {
  try {
    dropin::install_log_handler();
    static const auto spec = dropin::dropin_spec(toolkit::library::nvvm, CUCORE_DROPIN_MAJOR);
    std::vector<std::string> searched;
    const auto path = dropin::find_real_library(
        spec, "CUCORE_RUN_NVVM", reinterpret_cast<const void*>(&load_real), searched,
        dropin::wheel_dirs(toolkit::library::nvvm, CUCORE_DROPIN_MAJOR));
    if (!path) {
      std::string list;
      for (const auto& s : searched) list += "\n  " + s;
      dropin::report_once("nvvm",
                          "cucore run: no real libnvvm.so.4 to forward to (set "
                          "CUCORE_RUN_NVVM=/path/to/libnvvm.so.4, or CUDA_HOME); looked at:" +
                              list);
      return nullptr;
    }
    const auto& table = detail::nvvm_table();
    if (!table.api) {
      dropin::report_once(
          "nvvm", "cucore run: cannot use the real libNVVM " + *path + ": " + table.status.error);
      return nullptr;
    }
    auto* r = new real_nvvm;
    r->api = table.api.get();
    const auto& lib = *table.api->library;
    r->DisableConcurrentAPI =
        reinterpret_cast<decltype(r->DisableConcurrentAPI)>(lib.symbol("nvvmDisableConcurrentAPI"));
    r->Handle = reinterpret_cast<decltype(r->Handle)>(lib.symbol("__nvvmHandle"));
    r->HandleTarget = reinterpret_cast<decltype(r->HandleTarget)>(lib.symbol("__nvvmHandleTarget"));
    if (const auto id = detail::identify_file(lib.path())) {
      r->file_size = static_cast<std::int64_t>(id->size);
    }
    dropin::note(log_level::debug, "forwarding to " + lib.path());
    return r;
  } catch (...) {
    dropin::report_once("nvvm", "cucore run: cannot load the real libNVVM");
    return nullptr;
  }
}

const real_nvvm* real() noexcept {
  static const real_nvvm* r = load_real();
  return r;
}

constexpr nvvmResult kNoLibrary = NVVM_ERROR_INVALID_PROGRAM;

struct output {
  nvvmResult size_code = NVVM_SUCCESS;
  std::size_t size = 0;
  nvvmResult get_code = NVVM_SUCCESS;
  std::string bytes;
};

// The compiled result and the log.
struct recorded_compile {
  output outputs[2];
};

constexpr std::string_view kEntryMagic = "cucore-dropin-nvvm-entry-1";

template <class Size, class Get>
output record_output(nvvmProgram prog, Size get_size, Get get) {
  output o;
  o.size_code = get_size(prog, &o.size);
  if (o.size_code != NVVM_SUCCESS) {
    o.size = 0;
    o.get_code = o.size_code;
    return o;
  }
  std::string buffer(o.size + 1, '\0');
  o.get_code = get(prog, buffer.data());
  if (o.get_code == NVVM_SUCCESS) o.bytes = buffer.substr(0, o.size);
  return o;
}

std::vector<std::byte> serialize(const recorded_compile& c) {
  dropin::record_writer w(kEntryMagic);
  for (const auto& o : c.outputs) {
    w.number(o.size_code);
    w.number(static_cast<std::int64_t>(o.size));
    w.number(o.get_code);
    w.bytes(o.bytes);
  }
  return w.take();
}

recorded_compile deserialize(std::span<const std::byte> data) {
  dropin::record_reader r(data, kEntryMagic);
  recorded_compile c;
  for (auto& o : c.outputs) {
    o.size_code = static_cast<nvvmResult>(r.number());
    o.size = static_cast<std::size_t>(r.number());
    o.get_code = static_cast<nvvmResult>(r.number());
    o.bytes = std::string(r.bytes());
    if (o.get_code == NVVM_SUCCESS && o.bytes.size() != o.size) throw dropin::format_error{};
  }
  if (!r.done()) throw dropin::format_error{};
  return c;
}

struct program_state {
  dropin::record_writer modules{"cucore-dropin-nvvm-modules-1"};
  std::string uncacheable;
  std::optional<recorded_compile> hit;
};

struct program_table {
  std::mutex mutex;
  std::unordered_map<nvvmProgram, std::shared_ptr<program_state>> programs;
};

program_table& table() {
  static auto* t = new program_table;
  return *t;
}

std::shared_ptr<program_state> state_of(nvvmProgram prog) noexcept {
  if (prog == nullptr) return nullptr;
  try {
    auto& t = table();
    std::lock_guard lock(t.mutex);
    auto it = t.programs.find(prog);
    return it == t.programs.end() ? nullptr : it->second;
  } catch (...) {
    return nullptr;
  }
}

void remember(nvvmProgram prog, std::shared_ptr<program_state> state) noexcept {
  try {
    auto& t = table();
    std::lock_guard lock(t.mutex);
    t.programs[prog] = std::move(state);
  } catch (...) {
  }
}

std::shared_ptr<program_state> forget(nvvmProgram prog) noexcept {
  if (prog == nullptr) return nullptr;
  try {
    auto& t = table();
    std::lock_guard lock(t.mutex);
    auto it = t.programs.find(prog);
    if (it == t.programs.end()) return nullptr;
    auto state = std::move(it->second);
    t.programs.erase(it);
    return state;
  } catch (...) {
    return nullptr;
  }
}

void record_module(nvvmProgram prog, bool lazy, const char* buffer, std::size_t size,
                   const char* name) {
  auto s = state_of(prog);
  if (!s || !s->uncacheable.empty()) return;
  try {
    s->modules.number(lazy ? 1 : 0);
    s->modules.bytes(name ? std::string_view(name) : std::string_view("\x01(null)"));
    const auto digest = detail::sha256(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(buffer), size));
    s->modules.bytes(std::span<const std::byte>(digest.data(), digest.size()));
  } catch (...) {
    s->uncacheable = "out of memory recording a module";
  }
}

struct real_compile_failed {};

nvvmResult compile_through_cache(const real_nvvm& r, nvvmProgram prog, program_state& s,
                                 int num_options, const char** options) {
  const auto& api = *r.api;
  const auto forward = [&] { return api.nvvmCompileProgram(prog, num_options, options); };
  const auto bypass = [&](const std::string& why) {
    dropin::note(log_level::info, "bypass NVVM compile: " + why);
    dropin::record_skip(cache_skip_reason::uncacheable_options);
    return forward();
  };
  if (!s.uncacheable.empty()) return bypass(s.uncacheable);
  program_cache* cache = dropin::process_cache();
  if (cache == nullptr) return forward();
  if (num_options < 0 || (num_options > 0 && options == nullptr)) return bypass("no options");
  const version_probe probe = compiler_probes_for(*cache).nvvm();
  if (!probe.ok) return forward();
  dropin::record_writer key_record("cucore-dropin-nvvm-key-1");
  key_record.bytes(probe.value);
  key_record.number(r.file_size);
  key_record.number(num_options);
  for (int i = 0; i < num_options; ++i) {
    if (options[i] == nullptr) return bypass("a NULL option");
    if (std::strchr(options[i], '/') != nullptr) {
      return bypass(std::string("option \"") + options[i] + "\" may name a file");
    }
    key_record.bytes(options[i]);
  }
  // The variables the compilers read whose values can change the output
  // (key/compiler_environment.hpp); one that makes them write files bypasses.
  if (auto why = detail::environment_bypass()) return bypass(*why);
  const auto environment = detail::keyed_environment();
  key_record.number(static_cast<std::int64_t>(environment.size()));
  for (const auto& variable : environment) key_record.bytes(variable);
  auto modules = s.modules;  // a copy: a failed compile may be followed by more modules
  key_record.bytes(modules.take());
  const auto key_bytes = key_record.take();
  const auto digest = detail::sha256(std::span<const std::byte>(key_bytes));
  const std::span<const std::byte> key(digest.data(), digest.size());

  bool compiled = false;
  nvvmResult real_result = NVVM_SUCCESS;
  // What the compile read is observed: with no file in its key, it is stored only if it read
  // none, and no variable outside the compilers' table (key/observation_gate.hpp).
  detail::observed_inputs seen = detail::unobserved_compile();
  auto compile = [&]() -> object_code {
    compiled = true;
    real_result = detail::run_observed(seen, forward);
    if (real_result != NVVM_SUCCESS) throw real_compile_failed{};
    recorded_compile c;
    c.outputs[0] = record_output(prog, api.nvvmGetCompiledResultSize, api.nvvmGetCompiledResult);
    c.outputs[1] = record_output(prog, api.nvvmGetProgramLogSize, api.nvvmGetProgramLog);
    return object_code(code_type::object, serialize(c), "cucore run: libNVVM");
  };
  auto store = [&](const object_code& code) {
    if (const auto refusal = detail::check_observed_inputs(seen, {})) {
      dropin::note(log_level::info, "not storing an NVVM compile: " + refusal->message);
      dropin::record_skip(refusal->reason);
      return;
    }
    try {
      cache->put(key, code);
    } catch (const std::exception& e) {
      dropin::note(log_level::warning, std::string("could not store an NVVM compile: ") + e.what());
    }
  };
  try {
    flight_result result = get_or_compile(*cache, key, compile, store);
    if (!result.from_cache()) {
      dropin::note(log_level::info, "miss NVVM compile");
      return NVVM_SUCCESS;
    }
    try {
      s.hit = deserialize(result.code.code());
    } catch (const dropin::format_error&) {
      try {
        cache->erase(key);
      } catch (...) {
      }
      return forward();
    }
    dropin::note(log_level::info, "hit NVVM compile");
    return NVVM_SUCCESS;
  } catch (const real_compile_failed&) {
    dropin::note(log_level::info,
                 "failed NVVM compile (" + std::to_string(real_result) + "): not cached");
    return real_result;
  } catch (...) {
    if (compiled) return real_result;
    return forward();
  }
}

template <int Index, class Size>
nvvmResult answer_size(nvvmProgram prog, size_t* size, Size real_size) {
  if (auto s = state_of(prog); s && s->hit && size != nullptr) {
    const output& o = s->hit->outputs[Index];
    if (o.size_code == NVVM_SUCCESS) *size = o.size;
    return o.size_code;
  }
  return real_size(prog, size);
}

template <int Index, class Get>
nvvmResult answer_bytes(nvvmProgram prog, char* out, Get real_get) {
  if (auto s = state_of(prog); s && s->hit && out != nullptr) {
    const output& o = s->hit->outputs[Index];
    if (o.get_code == NVVM_SUCCESS) std::memcpy(out, o.bytes.data(), o.bytes.size());
    return o.get_code;
  }
  return real_get(prog, out);
}

}  // namespace

CUCORE_EXPORT const char* nvvmGetErrorString(nvvmResult result) {
  if (const auto* r = real()) return r->api->nvvmGetErrorString(result);
  return "NVVM_ERROR_INVALID_PROGRAM";
}

CUCORE_EXPORT nvvmResult nvvmVersion(int* major, int* minor) {
  const auto* r = real();
  return r ? r->api->nvvmVersion(major, minor) : kNoLibrary;
}

CUCORE_EXPORT nvvmResult nvvmIRVersion(int* major_ir, int* minor_ir, int* major_dbg,
                                       int* minor_dbg) {
  const auto* r = real();
  return r ? r->api->nvvmIRVersion(major_ir, minor_ir, major_dbg, minor_dbg) : kNoLibrary;
}

CUCORE_EXPORT nvvmResult nvvmCreateProgram(nvvmProgram* prog) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  const nvvmResult result = r->api->nvvmCreateProgram(prog);
  if (result == NVVM_SUCCESS && prog != nullptr && *prog != nullptr) {
    try {
      remember(*prog, std::make_shared<program_state>());
    } catch (...) {
    }
  }
  return result;
}

CUCORE_EXPORT nvvmResult nvvmDestroyProgram(nvvmProgram* prog) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  const nvvmProgram handle = prog != nullptr ? *prog : nullptr;
  auto state = forget(handle);
  const nvvmResult result = r->api->nvvmDestroyProgram(prog);
  if (result != NVVM_SUCCESS && state) remember(handle, std::move(state));
  return result;
}

CUCORE_EXPORT nvvmResult nvvmAddModuleToProgram(nvvmProgram prog, const char* buffer, size_t size,
                                                const char* name) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  const nvvmResult result = r->api->nvvmAddModuleToProgram(prog, buffer, size, name);
  if (result == NVVM_SUCCESS && buffer != nullptr) record_module(prog, false, buffer, size, name);
  return result;
}

CUCORE_EXPORT nvvmResult nvvmLazyAddModuleToProgram(nvvmProgram prog, const char* buffer,
                                                    size_t size, const char* name) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  const nvvmResult result = r->api->nvvmLazyAddModuleToProgram(prog, buffer, size, name);
  if (result == NVVM_SUCCESS && buffer != nullptr) record_module(prog, true, buffer, size, name);
  return result;
}

CUCORE_EXPORT nvvmResult nvvmCompileProgram(nvvmProgram prog, int num_options,
                                            const char** options) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  auto state = state_of(prog);
  if (!state) return r->api->nvvmCompileProgram(prog, num_options, options);
  state->hit.reset();
  try {
    return compile_through_cache(*r, prog, *state, num_options, options);
  } catch (...) {
    return r->api->nvvmCompileProgram(prog, num_options, options);
  }
}

CUCORE_EXPORT nvvmResult nvvmVerifyProgram(nvvmProgram prog, int num_options,
                                           const char** options) {
  const auto* r = real();
  return r ? r->api->nvvmVerifyProgram(prog, num_options, options) : kNoLibrary;
}

CUCORE_EXPORT nvvmResult nvvmGetCompiledResultSize(nvvmProgram prog, size_t* size) {
  const auto* r = real();
  return r ? answer_size<0>(prog, size, r->api->nvvmGetCompiledResultSize) : kNoLibrary;
}

CUCORE_EXPORT nvvmResult nvvmGetCompiledResult(nvvmProgram prog, char* buffer) {
  const auto* r = real();
  return r ? answer_bytes<0>(prog, buffer, r->api->nvvmGetCompiledResult) : kNoLibrary;
}

CUCORE_EXPORT nvvmResult nvvmGetProgramLogSize(nvvmProgram prog, size_t* size) {
  const auto* r = real();
  return r ? answer_size<1>(prog, size, r->api->nvvmGetProgramLogSize) : kNoLibrary;
}

CUCORE_EXPORT nvvmResult nvvmGetProgramLog(nvvmProgram prog, char* buffer) {
  const auto* r = real();
  return r ? answer_bytes<1>(prog, buffer, r->api->nvvmGetProgramLog) : kNoLibrary;
}

CUCORE_EXPORT nvvmResult nvvmDisableConcurrentAPI() {
  const auto* r = real();
  return r && r->DisableConcurrentAPI ? r->DisableConcurrentAPI() : kNoLibrary;
}

CUCORE_EXPORT void* __nvvmHandle(int id) {
  const auto* r = real();
  return r && r->Handle ? r->Handle(id) : nullptr;
}

CUCORE_EXPORT void* __nvvmHandleTarget(int id, bool flag) {
  const auto* r = real();
  return r && r->HandleTarget ? r->HandleTarget(id, flag) : nullptr;
}

// The real library's `name` for the shim (src/dropin/shim.h): functions this engine does not
// implement go straight to it, and a name it lacks makes the shim answer an error.
CUCORE_EXPORT void* cucore_dropin_real_symbol(const char* name) {
  const auto* r = real();
  return r != nullptr && name != nullptr ? r->api->library->symbol(name) : nullptr;
}
