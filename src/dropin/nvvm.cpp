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
#include <optional>
#include <string>
#include <vector>

#include "common/sha256.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/single_flight.hpp"
#include "dropin/cached_compile_notes.hpp"
#include "dropin/forwarding.hpp"
#include "dropin/program_table.hpp"
#include "dropin/support.hpp"
#include "key/compiler_environment.hpp"
#include "key/observation_gate.hpp"
#include "loader/libraries.hpp"
#include "observe/compiler_observer.hpp"

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
  return dropin::load_real_library<real_nvvm>(
      toolkit::library::nvvm, CUCORE_DROPIN_MAJOR,
      {"nvvm", "libNVVM", "libnvvm.so.4", env::variable::run_nvvm, "libnvvm.so.4",
       "cucore run: cannot load the real libNVVM"},
      &detail::nvvm_table, reinterpret_cast<const void*>(&load_real),
      [](real_nvvm& r, const detail::shared_library& lib) {
        r.DisableConcurrentAPI = reinterpret_cast<decltype(r.DisableConcurrentAPI)>(
            lib.symbol("nvvmDisableConcurrentAPI"));
        r.Handle = reinterpret_cast<decltype(r.Handle)>(lib.symbol("__nvvmHandle"));
        r.HandleTarget =
            reinterpret_cast<decltype(r.HandleTarget)>(lib.symbol("__nvvmHandleTarget"));
      });
}

const real_nvvm* real() noexcept {
  static const real_nvvm* r = load_real();
  return r;
}

constexpr nvvmResult kNoLibrary = NVVM_ERROR_INVALID_PROGRAM;

using output = dropin::recorded_output<nvvmResult>;
static_assert(NVVM_SUCCESS == 0);  // what dropin::recorded_output takes for success

// The compiled result and the log.
struct recorded_compile {
  output outputs[2];
};

using dropin::record_output;

constexpr std::string_view kEntryMagic = "cucore-dropin-nvvm-entry-1";

std::vector<std::byte> serialize(const recorded_compile& c) {
  dropin::record_writer w(kEntryMagic);
  for (const auto& o : c.outputs) dropin::write_output(w, o);
  return w.take();
}

recorded_compile deserialize(std::span<const std::byte> data) {
  dropin::record_reader r(data, kEntryMagic);
  recorded_compile c;
  const auto code = [](std::int64_t value) { return static_cast<nvvmResult>(value); };
  for (auto& o : c.outputs) o = dropin::read_output<output>(r, code);
  if (!r.done()) throw dropin::format_error{};
  return c;
}

struct program_state {
  dropin::record_writer modules{"cucore-dropin-nvvm-modules-1"};
  std::string uncacheable;
  std::optional<recorded_compile> hit;
};

using programs = dropin::program_table<nvvmProgram, program_state>;

void record_module(nvvmProgram prog, bool lazy, const char* buffer, std::size_t size,
                   const char* name) {
  auto s = programs::state_of(prog);
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
  // A copy of the modules: a failed compile may be followed by more modules.
  const auto digest = dropin::finish_digest_key(key_record, s.modules);
  const std::span<const std::byte> key(digest.data(), digest.size());

  bool compiled = false;
  nvvmResult real_result = NVVM_SUCCESS;
  // Run on a miss, observed by the cached compile: with no file in its key, it is stored only if
  // it read none, and no variable outside the compilers' table (key/observation_gate.hpp).
  auto compile = [&]() -> object_code {
    compiled = true;
    real_result = forward();
    if (real_result != NVVM_SUCCESS) throw real_compile_failed{};
    recorded_compile c;
    c.outputs[0] = record_output(prog, api.nvvmGetCompiledResultSize, api.nvvmGetCompiledResult);
    c.outputs[1] = record_output(prog, api.nvvmGetProgramLogSize, api.nvvmGetProgramLog);
    return object_code(code_type::object, serialize(c), "cucore run: libNVVM");
  };
  dropin::cached_compile_notes voice("an NVVM compile");
  detail::cached_compile_result result;
  try {
    detail::cached_compile({*cache, key, nullptr, "libNVVM", compile, voice}, result);
    switch (dropin::take_cached(*cache, key, result, s.hit, deserialize, "NVVM compile")) {
      case dropin::cached_answer::miss:
        return NVVM_SUCCESS;
      case dropin::cached_answer::hit:
        return NVVM_SUCCESS;
      case dropin::cached_answer::damaged:
        break;
    }
    return forward();
  } catch (const real_compile_failed&) {
    dropin::note(log_level::info,
                 "failed NVVM compile (" + std::to_string(real_result) + "): not cached");
    return real_result;
  } catch (...) {
    if (compiled) return real_result;
    return forward();
  }
}

}  // namespace

CUCORE_DROPIN_FORWARD(const char*, nvvmGetErrorString, (nvvmResult result), (result),
                      r->api->nvvmGetErrorString, "NVVM_ERROR_INVALID_PROGRAM")
CUCORE_DROPIN_FORWARD(nvvmResult, nvvmVersion, (int* major, int* minor), (major, minor),
                      r->api->nvvmVersion, kNoLibrary)
CUCORE_DROPIN_FORWARD(nvvmResult, nvvmIRVersion,
                      (int* major_ir, int* minor_ir, int* major_dbg, int* minor_dbg),
                      (major_ir, minor_ir, major_dbg, minor_dbg), r->api->nvvmIRVersion, kNoLibrary)
CUCORE_DROPIN_FORWARD(nvvmResult, nvvmVerifyProgram,
                      (nvvmProgram prog, int num_options, const char** options),
                      (prog, num_options, options), r->api->nvvmVerifyProgram, kNoLibrary)
CUCORE_DROPIN_FORWARD(nvvmResult, nvvmDisableConcurrentAPI, (), (), r->DisableConcurrentAPI,
                      kNoLibrary)
CUCORE_DROPIN_FORWARD(void*, __nvvmHandle, (int id), (id), r->Handle, nullptr)
CUCORE_DROPIN_FORWARD(void*, __nvvmHandleTarget, (int id, bool flag), (id, flag), r->HandleTarget,
                      nullptr)

CUCORE_EXPORT nvvmResult nvvmCreateProgram(nvvmProgram* prog) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  std::shared_ptr<program_state> state;
  try {
    state = std::make_shared<program_state>();
  } catch (...) {
    // Without its state the program is simply never cached.
  }
  return programs::create(prog, r->api->nvvmCreateProgram, NVVM_SUCCESS, std::move(state));
}

CUCORE_EXPORT nvvmResult nvvmDestroyProgram(nvvmProgram* prog) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  return programs::destroy(prog, r->api->nvvmDestroyProgram, NVVM_SUCCESS);
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
  auto state = programs::state_of(prog);
  if (!state) return r->api->nvvmCompileProgram(prog, num_options, options);
  state->hit.reset();
  try {
    return compile_through_cache(*r, prog, *state, num_options, options);
  } catch (...) {
    return r->api->nvvmCompileProgram(prog, num_options, options);
  }
}

CUCORE_DROPIN_GETTER_PAIR(nvvmResult, nvvmProgram, nvvmGetCompiledResultSize, nvvmGetCompiledResult,
                          char*, outputs[0], r->api->nvvmGetCompiledResultSize,
                          r->api->nvvmGetCompiledResult, dropin::every_output_recorded)
CUCORE_DROPIN_GETTER_PAIR(nvvmResult, nvvmProgram, nvvmGetProgramLogSize, nvvmGetProgramLog, char*,
                          outputs[1], r->api->nvvmGetProgramLogSize, r->api->nvvmGetProgramLog,
                          dropin::every_output_recorded)

CUCORE_DROPIN_REAL_SYMBOL()
