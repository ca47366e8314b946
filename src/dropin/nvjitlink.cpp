// The drop-in libnvJitLink.so.13 of `cucore run` (docs/transparent-cache.md): nvJitLink 13's
// exported API (the versioned __nvJitLink*_13_0 entry points its header's inline functions call,
// the plain names,
// __nvJitLinkAPI), every call forwarded to the real library, and nvJitLinkComplete answered from
// cucore's program cache.
//
// Inputs are forwarded as they come (so the real library checks them and answers its own return
// codes) and recorded beside the real handle: their kind, name and bytes (a file's bytes read
// here). Complete makes a key of the options, every input, and the real library's identity; a miss
// links with the real library and stores every output (linked cubin and PTX, both logs, each
// getter's return code); a hit answers the getters from the entry and the real handle is never
// completed.
#include <nvJitLink.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
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
#include "program/nvrtc_option_table.hpp"

#ifndef CUCORE_DROPIN_MAJOR
#define CUCORE_DROPIN_MAJOR 13  // the CUDA major of the real library (src/dropin/CMakeLists.txt)
#endif

namespace {

using namespace cucore;

struct real_nvjitlink {
  const detail::nvjitlink_api* api = nullptr;
  nvJitLinkResult (*AddFile)(nvJitLinkHandle, nvJitLinkInputType, const char*) = nullptr;
  void* (*API)(int) = nullptr;
  std::int64_t file_size = 0;
};

const real_nvjitlink* load_real() noexcept {
  // The .so.12 drop-in's override is CUCORE_RUN_NVJITLINK12 (`cucore run --nvjitlink` sets the
  // one of the file's major), so that one file never serves both.
  return dropin::load_real_library<real_nvjitlink>(
      toolkit::library::nvjitlink, CUCORE_DROPIN_MAJOR,
      {"nvjitlink", "nvJitLink",
       CUCORE_DROPIN_MAJOR == 12 ? "libnvJitLink.so.12" : "libnvJitLink.so.13",
       CUCORE_DROPIN_MAJOR == 12 ? env::variable::run_nvjitlink12 : env::variable::run_nvjitlink,
       "the library", "cucore run: cannot load the real nvJitLink"},
      &detail::nvjitlink_table, reinterpret_cast<const void*>(&load_real),
      [](real_nvjitlink& r, const detail::shared_library& lib) {
        r.AddFile = reinterpret_cast<decltype(r.AddFile)>(lib.symbol("nvJitLinkAddFile"));
        r.API = reinterpret_cast<decltype(r.API)>(lib.symbol("__nvJitLinkAPI"));
      });
}

const real_nvjitlink* real() noexcept {
  static const real_nvjitlink* r = load_real();
  return r;
}

constexpr nvJitLinkResult kNoLibrary = NVJITLINK_ERROR_INTERNAL;

using output = dropin::recorded_output<nvJitLinkResult>;
static_assert(NVJITLINK_SUCCESS == 0);  // what dropin::recorded_output takes for success

// Cubin, PTX, error log, info log.
struct recorded_link {
  nvJitLinkResult complete = NVJITLINK_SUCCESS;
  output outputs[4];
  // The linked LTO-IR getters' answers (nvJitLink 13.3+, which has nvJitLinkGetLinkedLTOIR; the
  // LTO-IR exists under -lto). Absent in a record an older drop-in wrote: a hit of such a record
  // completes the real link when the linked LTO-IR is asked for (link_state::real_completed).
  std::optional<output> ltoir;
};

constexpr std::string_view kEntryMagic = "cucore-dropin-nvjitlink-entry-1";

using dropin::record_output;

recorded_link record(const real_nvjitlink& r, nvJitLinkHandle handle) {
  const auto& api = *r.api;
  recorded_link out;
  out.outputs[0] =
      record_output(handle, api.nvJitLinkGetLinkedCubinSize,
                    [&](nvJitLinkHandle h, char* p) { return api.nvJitLinkGetLinkedCubin(h, p); });
  out.outputs[1] = record_output(handle, api.nvJitLinkGetLinkedPtxSize, api.nvJitLinkGetLinkedPtx);
  out.outputs[2] = record_output(handle, api.nvJitLinkGetErrorLogSize, api.nvJitLinkGetErrorLog);
  out.outputs[3] = record_output(handle, api.nvJitLinkGetInfoLogSize, api.nvJitLinkGetInfoLog);
  if (api.nvJitLinkGetLinkedLTOIRSize != nullptr && api.nvJitLinkGetLinkedLTOIR != nullptr) {
    out.ltoir = record_output(
        handle, api.nvJitLinkGetLinkedLTOIRSize,
        [&](nvJitLinkHandle h, char* p) { return api.nvJitLinkGetLinkedLTOIR(h, p); });
  }
  return out;
}

std::vector<std::byte> serialize(const recorded_link& link) {
  dropin::record_writer w(kEntryMagic);
  w.number(link.complete);
  for (const auto& o : link.outputs) dropin::write_output(w, o);
  // Appended, so that a record without it (an older drop-in's) still reads.
  if (link.ltoir) dropin::write_output(w, *link.ltoir);
  return w.take();
}

recorded_link deserialize(std::span<const std::byte> data) {
  dropin::record_reader r(data, kEntryMagic);
  recorded_link link;
  const auto code = [](std::int64_t value) { return static_cast<nvJitLinkResult>(value); };
  link.complete = code(r.number());
  for (auto& o : link.outputs) o = dropin::read_output<output>(r, code);
  if (!r.done()) link.ltoir = dropin::read_output<output>(r, code);
  if (!r.done()) throw dropin::format_error{};
  return link;
}

struct link_state {
  std::vector<std::string> options;
  dropin::record_writer inputs{"cucore-dropin-nvjitlink-inputs-1"};
  std::string uncacheable;
  cache_skip_reason uncacheable_reason = cache_skip_reason::uncacheable_options;
  std::optional<recorded_link> hit;
  // After a hit: the real link was completed for a getter its record cannot answer, and its result.
  bool real_completed = false;
  nvJitLinkResult real_complete_result = NVJITLINK_SUCCESS;
};

using programs = dropin::program_table<nvJitLinkHandle, link_state>;

void record_input(link_state& s, nvJitLinkInputType type, const void* data, std::size_t size,
                  const char* name) {
  if (!s.uncacheable.empty()) return;
  s.inputs.number(type);
  s.inputs.bytes(name ? std::string_view(name) : std::string_view("\x01(null)"));
  const auto digest =
      detail::sha256(std::span<const std::byte>(static_cast<const std::byte*>(data), size));
  s.inputs.bytes(std::span<const std::byte>(digest.data(), digest.size()));
}

struct real_link_failed {};

nvJitLinkResult complete_through_cache(const real_nvjitlink& r, nvJitLinkHandle handle,
                                       link_state& s) {
  const auto& api = *r.api;
  const auto forward = [&] { return api.nvJitLinkComplete(handle); };
  if (!s.uncacheable.empty()) {
    dropin::note(log_level::info, "bypass link: " + s.uncacheable);
    dropin::record_skip(s.uncacheable_reason);
    return forward();
  }
  program_cache* cache = dropin::process_cache();
  if (cache == nullptr) return forward();
  const linker_probe probe = compiler_probes_for(*cache).linker();
  if (!probe.ok) return forward();
  dropin::record_writer key_record("cucore-dropin-nvjitlink-key-1");
  key_record.bytes(probe.version);
  key_record.number(r.file_size);
  key_record.number(static_cast<std::int64_t>(s.options.size()));
  for (const auto& o : s.options) key_record.bytes(o);
  // The variables the compilers read whose values can change the output
  // (key/compiler_environment.hpp); one that makes them write files bypasses.
  if (auto why = detail::environment_bypass()) {
    dropin::note(log_level::info, "bypass link: " + *why);
    dropin::record_skip(cache_skip_reason::compiler_environment);
    return forward();
  }
  // A copy of the inputs: more may follow a failed Complete.
  const auto digest = dropin::finish_digest_key(key_record, s.inputs);
  const std::span<const std::byte> key(digest.data(), digest.size());

  bool linked = false;
  nvJitLinkResult real_result = NVJITLINK_SUCCESS;
  // Run on a miss, observed by the cached compile: with no file in its key, it is stored only if
  // it read none, and no variable outside the compilers' table (key/observation_gate.hpp).
  auto compile = [&]() -> object_code {
    linked = true;
    real_result = forward();
    if (real_result != NVJITLINK_SUCCESS) throw real_link_failed{};
    return object_code(code_type::object, serialize(record(r, handle)), "cucore run: nvJitLink");
  };
  dropin::cached_compile_notes voice("a link");
  detail::cached_compile_result result;
  try {
    detail::cached_compile({*cache, key, nullptr, "nvJitLink", compile, voice}, result);
    switch (dropin::take_cached(*cache, key, result, s.hit, deserialize, "link")) {
      case dropin::cached_answer::miss:
        return NVJITLINK_SUCCESS;
      case dropin::cached_answer::hit:
        return s.hit->complete;
      case dropin::cached_answer::damaged:
        break;
    }
    return forward();
  } catch (const real_link_failed&) {
    dropin::note(log_level::info, "failed link (" + std::to_string(real_result) + "): not cached");
    return real_result;
  } catch (...) {
    if (linked) return real_result;
    return forward();
  }
}

// nvJitLink 13.3+. A hit whose record has no linked LTO-IR (an older drop-in's) completes the real
// link once, every input having been forwarded to it, and the getters go to it: never an answer
// from a handle that was not completed. The failure of that link, when it fails.
std::optional<nvJitLinkResult> complete_real_for(const real_nvjitlink& r, nvJitLinkHandle handle,
                                                 link_state& s) noexcept {
  if (!s.real_completed) {
    s.real_complete_result = r.api->nvJitLinkComplete(handle);
    s.real_completed = true;
    dropin::note(log_level::info, "completed a link for the linked LTO-IR its entry lacks");
  }
  if (s.real_complete_result != NVJITLINK_SUCCESS) return s.real_complete_result;
  return std::nullopt;
}

}  // namespace

// The engine's functions: the shim (generated/nvjitlink*.inc) calls them for every versioned entry
// point of a function (__nvJitLinkCreate_12_0 ... _13_5) and its plain name.

CUCORE_EXPORT nvJitLinkResult __nvJitLinkCreate_13_0(nvJitLinkHandle* handle, uint32_t num_options,
                                                     const char* const* options) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  std::shared_ptr<link_state> state;
  try {
    state = std::make_shared<link_state>();
    if (num_options > 0 && options == nullptr) state->uncacheable = "no option array";
    // ptxas's arguments (-Xptxas=, each one argument) and the options that name files: the key
    // does not read the files (nvJitLink 13.0 takes only these exact spellings).
    std::vector<std::string> ptxas;
    const auto names_file = [&](std::string why) {
      state->uncacheable = std::move(why);
      state->uncacheable_reason = cache_skip_reason::option_file;
    };
    for (uint32_t i = 0; state->uncacheable.empty() && i < num_options; ++i) {
      if (options[i] == nullptr) {
        state->uncacheable = "a NULL option";
        continue;
      }
      const std::string_view o(options[i]);
      if (o.starts_with("-uidx=")) {
        names_file("option \"" + std::string(o) +
                   "\" makes nvJitLink read that index file, which the key does not cover");
      } else if (o.starts_with("-Xnvvm=")) {
        state->uncacheable = "option \"" + std::string(o) +
                             "\" passes an option to NVVM inside nvJitLink, which may read or "
                             "write files";
      } else if (o.find('/') != std::string_view::npos) {
        names_file("option \"" + std::string(o) + "\" may name a file");
      } else {
        if (o.starts_with("-Xptxas=")) ptxas.emplace_back(o.substr(8));
        state->options.emplace_back(o);
      }
    }
    if (state->uncacheable.empty()) {
      if (std::string why = detail::ptxas_arguments_name_files(ptxas); !why.empty()) {
        names_file("-Xptxas= " + why);
      }
    }
  } catch (...) {
    state.reset();
  }
  const auto real_create = [&](nvJitLinkHandle* h) {
    return r->api->nvJitLinkCreate(h, num_options, const_cast<const char**>(options));
  };
  return programs::create(handle, real_create, NVJITLINK_SUCCESS, std::move(state));
}

CUCORE_EXPORT nvJitLinkResult __nvJitLinkDestroy_13_0(nvJitLinkHandle* handle) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  return programs::destroy(handle, r->api->nvJitLinkDestroy, NVJITLINK_SUCCESS);
}

CUCORE_EXPORT nvJitLinkResult __nvJitLinkAddData_13_0(nvJitLinkHandle handle,
                                                      nvJitLinkInputType type, const void* data,
                                                      size_t size, const char* name) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  const nvJitLinkResult result = r->api->nvJitLinkAddData(handle, type, data, size, name);
  if (result == NVJITLINK_SUCCESS) {
    if (auto s = programs::state_of(handle)) {
      try {
        record_input(*s, type, data, size, name);
      } catch (...) {
        s->uncacheable = "out of memory recording an input";
      }
    }
  }
  return result;
}

CUCORE_EXPORT nvJitLinkResult __nvJitLinkAddFile_13_0(nvJitLinkHandle handle,
                                                      nvJitLinkInputType type,
                                                      const char* file_name) {
  const auto* r = real();
  if (r == nullptr || r->AddFile == nullptr) return kNoLibrary;
  // Read before the real call, so that the key has the bytes the library links.
  std::optional<std::string> bytes;
  if (file_name != nullptr) {
    try {
      std::ifstream in(file_name, std::ios::binary);
      if (in) bytes = std::string(std::istreambuf_iterator<char>(in), {});
    } catch (...) {
      bytes.reset();
    }
  }
  const nvJitLinkResult result = r->AddFile(handle, type, file_name);
  if (result == NVJITLINK_SUCCESS) {
    if (auto s = programs::state_of(handle)) {
      try {
        if (!bytes) {
          s->uncacheable = "an input file cucore cannot read";
        } else {
          record_input(*s, type, bytes->data(), bytes->size(), file_name);
        }
      } catch (...) {
        s->uncacheable = "out of memory recording an input";
      }
    }
  }
  return result;
}

CUCORE_EXPORT nvJitLinkResult __nvJitLinkComplete_13_0(nvJitLinkHandle handle) {
  const auto* r = real();
  if (r == nullptr) return kNoLibrary;
  auto state = programs::state_of(handle);
  if (!state) return r->api->nvJitLinkComplete(handle);
  state->hit.reset();
  state->real_completed = false;
  try {
    return complete_through_cache(*r, handle, *state);
  } catch (...) {
    return r->api->nvJitLinkComplete(handle);
  }
}

// Kind's getter pair (__nvJitLinkGet<Kind>Size_13_0, __nvJitLinkGet<Kind>_13_0), answered from the
// record's `member` on a hit.
#define CUCORE_LINK_GETTERS(Kind, Out, member)                                                 \
  CUCORE_DROPIN_GETTER_PAIR(nvJitLinkResult, nvJitLinkHandle, __nvJitLinkGet##Kind##Size_13_0, \
                            __nvJitLinkGet##Kind##_13_0, Out, member,                          \
                            r->api->nvJitLinkGet##Kind##Size, r->api->nvJitLinkGet##Kind,      \
                            complete_real_for)

CUCORE_LINK_GETTERS(LinkedCubin, void*, outputs[0])
CUCORE_LINK_GETTERS(LinkedPtx, char*, outputs[1])
CUCORE_LINK_GETTERS(ErrorLog, char*, outputs[2])
CUCORE_LINK_GETTERS(InfoLog, char*, outputs[3])
CUCORE_LINK_GETTERS(LinkedLTOIR, void*, ltoir)  // nvJitLink 13.3+

#undef CUCORE_LINK_GETTERS

CUCORE_DROPIN_FORWARD(nvJitLinkResult, nvJitLinkVersion, (unsigned int* major, unsigned int* minor),
                      (major, minor), r->api->nvJitLinkVersion, kNoLibrary)
CUCORE_DROPIN_FORWARD(void*, __nvJitLinkAPI, (int magic), (magic), r->API, nullptr)

CUCORE_DROPIN_REAL_SYMBOL()
