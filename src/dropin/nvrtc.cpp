// The drop-in libnvrtc.so.13 of `cucore run` (docs/transparent-cache.md): NVRTC 13's exported API,
// every call forwarded to the real library, and nvrtcCompileProgram answered from cucore's program
// cache.
//
// A program's handle is the real library's own: the drop-in keeps, beside it, what the program gave
// nvrtcCreateProgram and nvrtcAddNameExpression. A compile makes cucore's key of those inputs and
// the options; a miss compiles with the real library and stores every output the compile produced
// (each getter's return code, size and bytes, the log, each lowered name, the PCH status); a hit
// leaves the real program uncompiled and answers the getters from the entry. Anything the drop-in
// cannot key (options with side effects, files the key cannot see, a program made through an entry
// point it cannot read) and any internal failure goes to the real library as if the drop-in were
// not there.
#include <nvrtc.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/environment.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/single_flight.hpp"
#include "cucore/error.hpp"
#include "dropin/cached_compile_notes.hpp"
#include "dropin/forwarding.hpp"
#include "dropin/nvrtc_entry.hpp"
#include "dropin/nvrtc_options.hpp"
#include "dropin/program_table.hpp"
#include "dropin/support.hpp"
#include "key/compiler_environment.hpp"
#include "loader/libraries.hpp"
#include "observe/compiler_observer.hpp"
#include "server/client.hpp"
#include "server/nvrtc_record.hpp"

#ifndef CUCORE_DROPIN_MAJOR
#define CUCORE_DROPIN_MAJOR 13  // the CUDA major of the real library (src/dropin/CMakeLists.txt)
#endif

namespace {

using namespace cucore;

using cpex_fn = nvrtcResult (*)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                const char* const*, std::uintptr_t, std::uintptr_t, std::uintptr_t);

// The real library: cucore's loader table (pinned to the file find_real_library chose), plus the
// entry points that table does not hold.
struct real_nvrtc {
  const detail::nvrtc_api* api = nullptr;
  nvrtcResult (*GetOptiXIRSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetOptiXIR)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetNumSupportedArchs)(int*) = nullptr;
  nvrtcResult (*GetSupportedArchs)(int*) = nullptr;
  nvrtcResult (*SetFlowCallback)(nvrtcProgram, int (*)(void*, void*), void*) = nullptr;
  cpex_fn CPEx = nullptr;
  std::int64_t file_size = 0;
};

const real_nvrtc* load_real() noexcept {
  // The .so.12 drop-in's override is CUCORE_RUN_NVRTC12 (`cucore run --nvrtc` sets the one of
  // the file's major), so that one file never serves both.
  return dropin::load_real_library<real_nvrtc>(
      toolkit::library::nvrtc, CUCORE_DROPIN_MAJOR,
      {"nvrtc", "NVRTC", CUCORE_DROPIN_MAJOR == 12 ? "libnvrtc.so.12" : "libnvrtc.so.13",
       CUCORE_DROPIN_MAJOR == 12 ? env::variable::run_nvrtc12 : env::variable::run_nvrtc,
       "the library", "cucore run: cannot load the real NVRTC (out of memory?)"},
      &detail::nvrtc_table, reinterpret_cast<const void*>(&load_real),
      [](real_nvrtc& r, const detail::shared_library& lib) {
        r.GetOptiXIRSize =
            reinterpret_cast<decltype(r.GetOptiXIRSize)>(lib.symbol("nvrtcGetOptiXIRSize"));
        r.GetOptiXIR = reinterpret_cast<decltype(r.GetOptiXIR)>(lib.symbol("nvrtcGetOptiXIR"));
        r.GetNumSupportedArchs = reinterpret_cast<decltype(r.GetNumSupportedArchs)>(
            lib.symbol("nvrtcGetNumSupportedArchs"));
        r.GetSupportedArchs =
            reinterpret_cast<decltype(r.GetSupportedArchs)>(lib.symbol("nvrtcGetSupportedArchs"));
        r.SetFlowCallback =
            reinterpret_cast<decltype(r.SetFlowCallback)>(lib.symbol("nvrtcSetFlowCallback"));
        r.CPEx = reinterpret_cast<cpex_fn>(lib.symbol("__nvrtcCPEx"));
      });
}

const real_nvrtc* real() noexcept {
  static const real_nvrtc* r = load_real();  // leaked: programs call NVRTC until exit
  return r;
}

// What the real library says when it cannot be reached.
constexpr nvrtcResult kNoLibrary = NVRTC_ERROR_INTERNAL_ERROR;

// --- what a compile produced: its cache entry (dropin/nvrtc_entry.hpp) ----------------------

using recorded_result = detail::nvrtc_record;
using dropin::nvrtc_entry::deserialize;
using dropin::nvrtc_entry::serialize;

constexpr std::string_view kEntryName = "cucore run: NVRTC compile";

// --- programs --------------------------------------------------------------------------------

struct program_state {
  std::string source;
  std::string name;
  std::vector<include_header> headers;
  std::vector<std::string> name_expressions;  // those the real library accepted, in order
  std::string uncacheable;                    // non-empty: why no compile of it is cached
  std::optional<recorded_result> hit;         // the last compile was answered from the cache
  // The options of the last compile, when it was a hit: a getter the hit's record cannot answer
  // (the Tile IR of an older record) compiles the real program with them first.
  std::vector<std::string> options;
  bool real_compiled = false;  // that compile ran (its result in real_compile_result)
  nvrtcResult real_compile_result = NVRTC_SUCCESS;
};

using programs = dropin::program_table<nvrtcProgram, program_state>;

std::shared_ptr<program_state> make_state(const char* src, const char* name, int num_headers,
                                          const char* const* headers,
                                          const char* const* include_names) {
  auto s = std::make_shared<program_state>();
  s->source = src ? src : "";
  s->name = name ? name : "default_program";
  if (num_headers < 0) {
    s->uncacheable = "a negative header count";
  } else if (num_headers > 0 && (headers == nullptr || include_names == nullptr)) {
    s->uncacheable = "headers given without their contents or names";
  }
  for (int i = 0; s->uncacheable.empty() && i < num_headers; ++i) {
    if (headers[i] == nullptr || include_names[i] == nullptr) {
      s->uncacheable = "a NULL in-memory header or header name";
      break;
    }
    s->headers.push_back({include_names[i], headers[i]});
  }
  return s;
}

struct real_compile_failed {};

// The key's extra digest: everything the drop-in's key adds to what program_options carries.
std::string extra_digest(const real_nvrtc& r, const dropin::parsed_nvrtc_options& parsed,
                         const program_state& s) {
  dropin::record_writer w("cucore-dropin-nvrtc-key-1");
  w.number(static_cast<std::int64_t>(parsed.canonical.size()));
  for (const auto& o : parsed.canonical) w.bytes(o);
  w.number(static_cast<std::int64_t>(s.name_expressions.size()));
  for (const auto& e : s.name_expressions) w.bytes(e);
  w.number(r.file_size);
  // Headers found through a relative directory (the program name's, the current directory for a
  // name without one, a relative -I or pre-include): their paths as NVRTC writes them into the
  // outputs (__FILE__, line info) depend on where the process runs.
  const bool may_include = !s.headers.empty() || !parsed.fields.pre_include.empty() ||
                           s.source.find("include") != std::string::npos;
  bool relative = s.name.empty() || s.name.front() != '/';
  for (const auto& d : parsed.fields.include_path) relative = relative || d.front() != '/';
  for (const auto& p : parsed.fields.pre_include) relative = relative || p.front() != '/';
  w.bytes(may_include && relative ? dropin::current_directory() : std::string());
  const auto bytes = w.take();
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// --use-bundled-headers=DIR: what NVRTC does before it compiles, done here first, so that DIR holds
// what the program expects on a hit too and the key walks the headers NVRTC will read. The real
// nvrtcInstallBundledHeaders, as NVRTC's compile calls it (flags 0: skipped when DIR's marker names
// this NVRTC; else it installs, under NVRTC's lock DIR/.nvrtc_install.lock). Returns why the
// compile must bypass the cache instead: an NVRTC without bundled headers (which rejects the
// option itself), an install that fails, or a DIR that is not a directory of the user's that
// others cannot write.
std::optional<std::string> install_bundled_headers(const real_nvrtc& r,
                                                   const std::vector<std::string>& dirs) {
  const auto& api = *r.api;
  if (api.nvrtcInstallBundledHeaders == nullptr) {
    return "--use-bundled-headers: this NVRTC has no bundled headers (13.3+)";
  }
  for (const auto& dir : dirs) {
    const char* log = nullptr;
    const nvrtcResult result = api.nvrtcInstallBundledHeaders(dir.c_str(), 0, &log);
    if (result != NVRTC_SUCCESS) {
      return "--use-bundled-headers=" + dir + ": installing NVRTC's bundled headers failed (" +
             std::to_string(result) + (log ? std::string(": ") + log : std::string()) + ")";
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
        (st.st_mode & S_IWOTH) != 0) {
      return "--use-bundled-headers=" + dir +
             ": not a directory of the user's that others cannot write";
    }
    // Just installed: the key refuses to store a compile that read files changed within their
    // timestamps' granularity (program_cache_key::check_store), so the first compile after an
    // install would go unstored. Until the marker is 30 ms old (over any file system's granularity
    // and the coarse clock file times come from), wait: once per install.
    struct stat marker {};
    if (::stat((dir + "/.nvrtc_headers_version").c_str(), &marker) == 0) {
      timespec now{};
      ::clock_gettime(CLOCK_REALTIME, &now);
      const long long age = (now.tv_sec - marker.st_mtim.tv_sec) * 1'000'000'000LL +
                            (now.tv_nsec - marker.st_mtim.tv_nsec);
      constexpr long long kSettled = 30'000'000;
      if (age > -kSettled && age < kSettled) {
        const long long wait_ns = kSettled - std::max(age, 0LL);
        const timespec wait{0, static_cast<long>(wait_ns)};
        ::nanosleep(&wait, nullptr);
      }
    }
  }
  return std::nullopt;
}

// Whether a miss goes to the user's compile server: CUCORE_COMPILE_SERVER (`cucore run --server`
// sets on), else auto (a running server is used, none is started: docs/compile-server.md). Not
// for the program's own PCH (NVRTC's heap is its process's) nor options that write files.
compile_server_mode server_mode(const program_options& fields) noexcept {
  if (fields.pch.value_or(false) || fields.create_pch || fields.use_pch || fields.pch_dir ||
      fields.time || fields.fdevice_time_trace) {
    return compile_server_mode::off;
  }
  static const compile_server_mode mode = [] {
    const auto env = env::text(env::variable::compile_server);
    if (!env) return compile_server_mode::automatic;
    try {
      return parse_compile_server_mode(*env);
    } catch (...) {
      dropin::note(log_level::warning,
                   "CUCORE_COMPILE_SERVER=\"" + std::string(*env) +
                       "\" is not off, on or auto: the compile server is not used");
      return compile_server_mode::off;
    }
  }();
  return mode;
}

nvrtcResult compile_through_cache(const real_nvrtc& r, nvrtcProgram prog, program_state& s,
                                  int num_options, const char* const* options) {
  const auto& api = *r.api;
  const auto forward = [&] { return api.nvrtcCompileProgram(prog, num_options, options); };
  const auto bypass = [&](std::string_view why, cache_skip_reason reason) {
    dropin::note(log_level::info, "bypass " + s.name + ": " + std::string(why));
    dropin::record_skip(reason);
    return forward();
  };
  if (!s.uncacheable.empty()) return bypass(s.uncacheable, cache_skip_reason::uncacheable_options);
  program_cache* cache = dropin::process_cache();
  if (cache == nullptr) return forward();

  auto parsed = dropin::parse_nvrtc_options(num_options, options);
  if (!parsed.bypass.empty()) {
    return bypass(parsed.bypass, parsed.bypass_needs_digest
                                     ? cache_skip_reason::needs_extra_digest
                                     : cache_skip_reason::uncacheable_options);
  }
  if (!parsed.bundled_headers.empty()) {
    if (auto why = install_bundled_headers(r, parsed.bundled_headers)) {
      return bypass(*why, cache_skip_reason::uncacheable_options);
    }
  }
  program_cache_key_inputs inputs;
  inputs.code = s.source;
  inputs.code_type = source_type::cxx;
  inputs.options = std::move(parsed.fields);
  inputs.options.name = s.name;
  inputs.options.headers = s.headers;
  try {
    inputs.options.arch = resolve_arch(inputs.options.arch.value_or("sm_75"));
  } catch (const std::exception&) {
    inputs.options.arch = "sm_75";  // the verbatim option, in the digest, names the real one
  }
  inputs.target = code_type::ptx;
  // The drop-in keeps every output of one compile (PTX, cubin, LTO-IR), and the program's
  // options reach the key only verbatim (the extra digest): the key's context rules
  // (key/compiler_environment.hpp) must see what they embed. Key-only: NVRTC gets the program's
  // own options.
  if (detail::embeds_working_directory(parsed.canonical, code_type::ptx)) {
    // parsed.canonical spells each option "-" + its canonical name in the option table.
    const bool lto =
        std::any_of(parsed.canonical.begin(), parsed.canonical.end(),
                    [](const std::string& o) { return o == "-dlto" || o == "-gen-opt-lto"; });
    inputs.options.lineinfo = true;  // the working directory, and file times for the cubin
    inputs.target = lto ? code_type::ltoir : code_type::cubin;
  }
  inputs.name_expressions = s.name_expressions;
  inputs.extra_digest = extra_digest(r, parsed, s);

  std::optional<program_cache_key> key;
  try {
    key = make_program_cache_key(inputs, compiler_probes_for(*cache));
  } catch (const extra_digest_required& e) {
    return bypass(e.what(), cache_skip_reason::needs_extra_digest);
  } catch (const std::exception& e) {
    return bypass(e.what(), cache_skip_reason::uncacheable_options);
  }
  // (The key's own bypass is the cached compile's, below: it wins over this one.)
  if (!key->bypass() && !key->includes().vouched.empty()) {
    return bypass("an #include through a macro whose value cucore cannot work out (" +
                      key->includes().vouched.front() + ")",
                  cache_skip_reason::needs_extra_digest);
  }

  bool compiled = false;
  nvrtcResult real_result = NVRTC_SUCCESS;
  // A compile the user's compile server answered (docs/compile-server.md): the real program stays
  // uncompiled and its getters are answered from the reply, as for a hit.
  std::optional<recorded_result> served;
  // Run on a miss, observed by the cached compile (here, or in the compile server's worker).
  auto compile = [&]() -> object_code {
    compiled = true;
    if (const auto mode = server_mode(inputs.options); mode != compile_server_mode::off) {
      const std::vector<std::string> option_list(options, options + num_options);
      if (auto reply = server::compile_raw_through_server(mode, s.source, inputs.options,
                                                          option_list, s.name_expressions)) {
        real_result = static_cast<nvrtcResult>(reply->result);
        served = std::move(reply->record);
        if (dropin::log_enabled(log_level::debug)) {
          dropin::note(log_level::debug, "compiled " + s.name + " in the compile server");
        }
        if (real_result != NVRTC_SUCCESS) throw real_compile_failed{};
        return object_code(code_type::object, serialize(*served), std::string(kEntryName));
      }
    }
    real_result = forward();
    if (real_result != NVRTC_SUCCESS) throw real_compile_failed{};
    return object_code(code_type::object,
                       serialize(detail::record_nvrtc_program(*r.api, prog, s.name_expressions)),
                       std::string(kEntryName));
  };
  dropin::cached_compile_notes voice(s.name);
  detail::cached_compile_result result;
  try {
    detail::cached_compile({*cache, *key, &*key, s.name, compile, voice}, result);
    if (result.bypassed) return forward();
    if (!result.from_cache() && served) {
      s.hit = std::move(served);
      if (dropin::log_enabled(log_level::info)) {
        dropin::note(log_level::info, "miss " + s.name + " " + key->hex().substr(0, 16) +
                                          " (compiled in the compile server)");
      }
      return NVRTC_SUCCESS;
    }
    if (!result.from_cache()) {
      if (dropin::log_enabled(log_level::info)) {
        dropin::note(log_level::info, "miss " + s.name + " " + key->hex().substr(0, 16));
      }
      return NVRTC_SUCCESS;
    }
    const auto bytes = result.code->code();
    try {
      s.hit = deserialize(bytes);
    } catch (const dropin::format_error&) {
      dropin::note(log_level::warning, "damaged cache entry for " + s.name + ": compiling");
      try {
        cache->erase(*key);
      } catch (...) {
      }
      return forward();
    }
    if (!s.hit->tile && r.api->nvrtcGetTileIRSize != nullptr) {
      try {
        s.options.assign(options, options + num_options);
      } catch (...) {
        s.hit.reset();  // without its options the program could not answer the Tile IR
        return forward();
      }
    }
    if (dropin::log_enabled(log_level::info)) {
      dropin::note(log_level::info, "hit " + s.name + " " + key->hex().substr(0, 16));
    }
    return NVRTC_SUCCESS;
  } catch (const real_compile_failed&) {
    dropin::note(log_level::info,
                 "failed " + s.name + " (" + std::to_string(real_result) + "): not cached");
    if (served) s.hit = std::move(served);  // the getters answer the server's compile
    return real_result;
  } catch (const std::exception& e) {
    if (compiled) return real_result;
    dropin::note(log_level::warning, "cache failed for " + s.name + " (" + e.what() +
                                         "): compiling with the real library");
    return forward();
  } catch (...) {
    if (compiled) return real_result;
    return forward();
  }
}

// A hit whose record has no Tile IR (written by an older drop-in): the real program is compiled
// with the hit's options, once, and the Tile IR getters go to it. Its result, when it fails.
std::optional<nvrtcResult> compile_real_for(const real_nvrtc& r, nvrtcProgram prog,
                                            program_state& s) noexcept {
  try {
    if (!s.real_compiled) {
      std::vector<const char*> options;
      for (const auto& o : s.options) options.push_back(o.c_str());
      s.real_compile_result = r.api->nvrtcCompileProgram(
          prog, static_cast<int>(options.size()), options.empty() ? nullptr : options.data());
      s.real_compiled = true;
      dropin::note(log_level::info, "compiled " + s.name + " for the Tile IR its entry lacks");
    }
  } catch (...) {
    return kNoLibrary;  // out of memory: the real program could not be compiled
  }
  if (s.real_compile_result != NVRTC_SUCCESS) return s.real_compile_result;
  return std::nullopt;
}

}  // namespace

// --- the exported API (src/dropin/nvrtc.map gives each its version node) ----------------------

CUCORE_DROPIN_FORWARD(const char*, nvrtcGetErrorString, (nvrtcResult result), (result),
                      r->api->nvrtcGetErrorString, "NVRTC_ERROR_INTERNAL_ERROR")
CUCORE_DROPIN_FORWARD(nvrtcResult, nvrtcVersion, (int* major, int* minor), (major, minor),
                      r->api->nvrtcVersion, kNoLibrary)
CUCORE_DROPIN_FORWARD(nvrtcResult, nvrtcGetNumSupportedArchs, (int* num_archs), (num_archs),
                      r->GetNumSupportedArchs, kNoLibrary)
CUCORE_DROPIN_FORWARD(nvrtcResult, nvrtcGetSupportedArchs, (int* archs), (archs),
                      r->GetSupportedArchs, kNoLibrary)
// Parameter lists, which clang-format would take for expressions.
// clang-format off
CUCORE_DROPIN_FORWARD(nvrtcResult, nvrtcGetPCHHeapSize, (size_t* ret), (ret),
                      r->api->nvrtcGetPCHHeapSize, kNoLibrary)
CUCORE_DROPIN_FORWARD(nvrtcResult, nvrtcSetPCHHeapSize, (size_t size), (size),
                      r->api->nvrtcSetPCHHeapSize, kNoLibrary)
CUCORE_DROPIN_FORWARD(nvrtcResult, nvrtcSetFlowCallback,
                      (nvrtcProgram prog, int (*callback)(void*, void*), void* payload),
                      (prog, callback, payload), r->SetFlowCallback, kNoLibrary)
// An undocumented way to create a program, with arguments the key cannot read: forwarded, and the
// program is never cached (it has no state here).
CUCORE_DROPIN_FORWARD(nvrtcResult, __nvrtcCPEx,
                      (nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                       const char* const* headers, const char* const* include_names,
                       std::uintptr_t a, std::uintptr_t b, std::uintptr_t c),
                      (prog, src, name, num_headers, headers, include_names, a, b, c), r->CPEx,
                      kNoLibrary)
// clang-format on

CUCORE_EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name,
                                             int num_headers, const char* const* headers,
                                             const char* const* include_names) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  // The state is made first: the program's strings are copied before the real call sees them.
  std::shared_ptr<program_state> state;
  try {
    if (src != nullptr && prog != nullptr) {
      state = make_state(src, name, num_headers, headers, include_names);
    }
  } catch (...) {
    state.reset();
  }
  const auto real_create = [&](nvrtcProgram* p) {
    return r->api->nvrtcCreateProgram(p, src, name, num_headers, headers, include_names);
  };
  return programs::create(prog, real_create, NVRTC_SUCCESS, std::move(state));
}

CUCORE_EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  return programs::destroy(prog, r->api->nvrtcDestroyProgram, NVRTC_SUCCESS);
}

CUCORE_EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options,
                                              const char* const* options) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  auto state = programs::state_of(prog);
  if (!state) return r->api->nvrtcCompileProgram(prog, num_options, options);
  state->hit.reset();
  state->options.clear();
  state->real_compiled = false;
  try {
    return compile_through_cache(*r, prog, *state, num_options, options);
  } catch (...) {
    // Only reachable before the real compile ran (it catches everything after).
    return r->api->nvrtcCompileProgram(prog, num_options, options);
  }
}

// Kind's getter pair (nvrtcGet<Kind>Size, nvrtcGet<Kind>), answered from the record's `member` on
// a hit.
#define CUCORE_NVRTC_GETTERS(Kind, member, real_size, real_get)                              \
  CUCORE_DROPIN_GETTER_PAIR(nvrtcResult, nvrtcProgram, nvrtcGet##Kind##Size, nvrtcGet##Kind, \
                            char*, member, real_size, real_get, compile_real_for)

CUCORE_NVRTC_GETTERS(PTX, ptx, r->api->nvrtcGetPTXSize, r->api->nvrtcGetPTX)
CUCORE_NVRTC_GETTERS(CUBIN, cubin, r->api->nvrtcGetCUBINSize, r->api->nvrtcGetCUBIN)
CUCORE_NVRTC_GETTERS(LTOIR, ltoir, r->api->nvrtcGetLTOIRSize, r->api->nvrtcGetLTOIR)
CUCORE_NVRTC_GETTERS(OptiXIR, optix, r->GetOptiXIRSize, r->GetOptiXIR)
CUCORE_NVRTC_GETTERS(ProgramLog, log, r->api->nvrtcGetProgramLogSize, r->api->nvrtcGetProgramLog)
// NVRTC 13.1+ (declared here: the nvrtc.h the drop-in builds with may predate them).
CUCORE_NVRTC_GETTERS(TileIR, tile, r->api->nvrtcGetTileIRSize, r->api->nvrtcGetTileIR)

#undef CUCORE_NVRTC_GETTERS

CUCORE_EXPORT nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char* name_expression) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  auto state = programs::state_of(prog);
  if (state && state->hit && name_expression != nullptr) return state->hit->add_after_code;
  const nvrtcResult result = r->api->nvrtcAddNameExpression(prog, name_expression);
  if (result == NVRTC_SUCCESS && state && name_expression != nullptr) {
    try {
      state->name_expressions.emplace_back(name_expression);
    } catch (...) {
      state->uncacheable = "out of memory recording a name expression";
    }
  }
  return result;
}

CUCORE_EXPORT nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char* name_expression,
                                              const char** lowered_name) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  if (const auto s = programs::hit_of(prog);
      s != nullptr && name_expression != nullptr && lowered_name != nullptr) {
    const auto& hit = *s->hit;
    for (const auto& n : hit.names) {
      if (n.expression == name_expression) {
        if (n.code == NVRTC_SUCCESS) *lowered_name = n.name.c_str();
        return n.code;
      }
    }
    return hit.unknown_name_code;
  }
  return r->api->nvrtcGetLoweredName(prog, name_expression, lowered_name);
}

CUCORE_EXPORT nvrtcResult nvrtcGetPCHCreateStatus(nvrtcProgram prog) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  if (const auto s = programs::hit_of(prog)) return s->hit->pch_status;
  return r->api->nvrtcGetPCHCreateStatus(prog);
}

CUCORE_EXPORT nvrtcResult nvrtcGetPCHHeapSizeRequired(nvrtcProgram prog, size_t* size) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  if (const auto s = programs::hit_of(prog); s != nullptr && size != nullptr) {
    if (s->hit->pch_required_code == NVRTC_SUCCESS) *size = s->hit->pch_required;
    return s->hit->pch_required_code;
  }
  return r->api->nvrtcGetPCHHeapSizeRequired(prog, size);
}

CUCORE_DROPIN_REAL_SYMBOL()
