#include "cucore/program.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>

#include "common/trace.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/single_flight.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/linker.hpp"
#include "cucore/log.hpp"
#include "cucore/toolkit.hpp"
#include "key/miss_explanation.hpp"
#include "key/program_notes.hpp"
#include "key/program_recipes.hpp"
#include "observe/compiler_observer.hpp"
#include "program/auto_pch.hpp"
#include "program/background_verifier.hpp"
#include "program/compiler_handles.hpp"
#include "program/hit_verifier.hpp"
#include "program/nvrtc_option_table.hpp"
#include "server/client.hpp"

namespace cucore {
namespace {

using detail::c_strings;
using detail::trim_nul;

// The header digest memo of the cache a compile() goes through, for the prefix keys of automatic
// PCH (program/auto_pch.hpp: they then read the digests and scans the program's key left there);
// set on the compiling thread for the duration of that compile.
thread_local const std::optional<std::filesystem::path>* t_cache_header_memo = nullptr;

struct cache_header_memo_scope {
  explicit cache_header_memo_scope(const std::optional<std::filesystem::path>* memo) {
    t_cache_header_memo = memo;
  }
  ~cache_header_memo_scope() { t_cache_header_memo = nullptr; }
  cache_header_memo_scope(const cache_header_memo_scope&) = delete;
  cache_header_memo_scope& operator=(const cache_header_memo_scope&) = delete;
};

std::string nvrtc_log(const detail::nvrtc_api& api, nvrtcProgram prog) {
  std::size_t size = 0;
  if (api.nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (api.nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return {};
  return trim_nul(std::move(log));
}

void check_nvrtc(const detail::nvrtc_api& api, nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) throw library_error("NVRTC", call, api.nvrtcGetErrorString(r));
}

void check_nvvm(const detail::nvvm_api& api, nvvmResult r, const char* call) {
  if (r != NVVM_SUCCESS) throw library_error("libNVVM", call, api.nvvmGetErrorString(r));
}

std::string nvvm_log(const detail::nvvm_api& api, nvvmProgram prog) {
  std::size_t size = 0;
  if (api.nvvmGetProgramLogSize(prog, &size) != NVVM_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (api.nvvmGetProgramLog(prog, log.data()) != NVVM_SUCCESS) return {};
  return trim_nul(std::move(log));
}

std::vector<std::byte> nvrtc_output(const detail::nvrtc_api& api, nvrtcProgram prog,
                                    code_type target) {
  using size_fn = nvrtcResult (*)(nvrtcProgram, std::size_t*);
  using get_fn = nvrtcResult (*)(nvrtcProgram, char*);
  size_fn get_size = api.nvrtcGetPTXSize;
  get_fn get = api.nvrtcGetPTX;
  const char* what = "nvrtcGetPTX";
  if (target == code_type::cubin) {
    get_size = api.nvrtcGetCUBINSize;
    get = api.nvrtcGetCUBIN;
    what = "nvrtcGetCUBIN";
  } else if (target == code_type::ltoir) {
    get_size = api.nvrtcGetLTOIRSize;
    get = api.nvrtcGetLTOIR;
    what = "nvrtcGetLTOIR";
  }
  if (target == code_type::tile_ir) {  // compile_nvrtc checked that NVRTC has them
    get_size = api.nvrtcGetTileIRSize;
    get = api.nvrtcGetTileIR;
    what = "nvrtcGetTileIR";
  }
  std::size_t size = 0;
  check_nvrtc(api, get_size(prog, &size), what);
  std::vector<std::byte> out(size);
  check_nvrtc(api, get(prog, reinterpret_cast<char*>(out.data())), what);
  // PTX comes NUL-terminated; the object holds the text only.
  if (target == code_type::ptx) {
    while (!out.empty() && out.back() == std::byte{0}) out.pop_back();
  }
  return out;
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("cannot read \"" + path + "\"");
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

std::string_view to_string(pch_status status) noexcept {
  switch (status) {
    case pch_status::not_requested:
      return "not_requested";
    case pch_status::created:
      return "created";
    case pch_status::not_attempted:
      return "not_attempted";
    case pch_status::failed:
      return "failed";
  }
  return "unknown";
}

program::program(std::string code, source_type type, program_options options)
    : code_(std::move(code)), type_(type), options_(std::move(options)) {
  if (code_.empty()) {
    throw invalid_argument("program code is empty: pass the " + std::string(to_string(type_)) +
                           " source text");
  }
  if (type_ != source_type::nvvm && code_.find('\0') != std::string::npos) {
    throw invalid_argument(std::string(to_string(type_)) +
                           " source contains a NUL byte: pass text (only nvvm accepts bitcode)");
  }
}

compiler_backend program::backend() const {
  switch (type_) {
    case source_type::cxx:
      return compiler_backend::nvrtc;
    case source_type::nvvm:
      return compiler_backend::nvvm;
    case source_type::ptx:
      return linker::which_backend() == linker_backend::nvjitlink ? compiler_backend::nvjitlink
                                                                  : compiler_backend::driver;
  }
  return compiler_backend::nvrtc;
}

std::string_view to_string(cache_outcome outcome) noexcept {
  switch (outcome) {
    case cache_outcome::off:
      return "off";
    case cache_outcome::hit:
      return "hit";
    case cache_outcome::miss:
      return "miss";
  }
  return "unknown";
}

object_code program::compile(code_type target, std::span<const std::string> name_expressions,
                             program_cache* cache) {
  return compile(target, name_expressions, {}, cache);
}

object_code program::compile(code_type target, std::span<const std::string> text_names,
                             std::span<const std::string> byte_names, program_cache* cache) {
  const std::vector<std::string> all_names = begin_compile(target, text_names, byte_names);
  const std::span<const std::string> name_expressions(all_names);
  if (cache == nullptr) return compile_uncached(target, name_expressions);

  program_cache_key_inputs inputs;
  inputs.code = code_;
  inputs.code_type = type_;
  inputs.options = options_;
  inputs.target = target;
  inputs.name_expressions.assign(text_names.begin(), text_names.end());
  inputs.byte_name_expressions.assign(byte_names.begin(), byte_names.end());
  try {
    detail::trace_span span("key", "key");
    span.arg("program", options_.name);
    cache_key_ = make_program_cache_key(inputs, compiler_probes_for(*cache));
  } catch (const extra_digest_required& e) {
    throw extra_digest_required(
        std::string(e.what()) +
        " [program::compile(..., cache) derives the key itself and cannot take "
        "an extra_digest: build the key with cucore::make_program_cache_key(..., "
        "extra_digest) and pass it to program::compile(target, names, cache, key), or compile "
        "without the cache]");
  }
  return compile_cached(target, name_expressions, *cache, &inputs);
}

object_code program::compile(code_type target, std::span<const std::string> name_expressions,
                             program_cache& cache, const program_cache_key& key) {
  const std::vector<std::string> all_names = begin_compile(target, name_expressions, {});
  cache_key_ = key;
  return compile_cached(target, all_names, cache, nullptr);
}

std::vector<std::string> program::begin_compile(code_type target,
                                                std::span<const std::string> text_names,
                                                std::span<const std::string> byte_names) {
  check_target(type_, target);
  // NVRTC resolves both kinds alike (each distinct expression once); only the key tells them
  // apart.
  std::vector<std::string> all_names(text_names.begin(), text_names.end());
  for (const auto& name : byte_names) {
    if (std::find(all_names.begin(), all_names.end(), name) == all_names.end()) {
      all_names.push_back(name);
    }
  }
  if (!all_names.empty() && type_ != source_type::cxx) {
    throw invalid_argument("name_expressions are only supported for c++ programs (NVRTC); " +
                           std::string(to_string(type_)) + " code uses its symbols' own names");
  }
  log_.clear();
  pch_status_ = pch_status::not_requested;
  auto_pch_ = auto_pch_status::off;
  cache_outcome_ = cache_outcome::off;
  flight_outcome_.reset();
  cache_key_.reset();
  store_refusal_.reset();
  stored_ = false;
  verify_ = verify_outcome::not_verified;
  verify_report_.reset();
  miss_explanation_.reset();
  return all_names;
}

// The one cached compile of the library and the tool: bypass, lookup, single-flight, the compile
// observed, the store gate, the store, the statistics.
object_code program::compile_cached(code_type target, std::span<const std::string> name_expressions,
                                    program_cache& cache_ref,
                                    const program_cache_key_inputs* key_inputs) {
  program_cache* cache = &cache_ref;
  // Stale entries verify mode's thread found in this cache and could not remove itself.
  for (const auto& stale : detail::take_stale_entries(cache)) {
    try {
      cache->erase(stale);
    } catch (const std::exception& e) {
      cucore::log(log_level::warning,
                  std::string("verify: could not remove a stale entry: ") + e.what());
    }
  }
  // The whole cached compile in the trace (docs/trace.md), named by the program, its outcome.
  detail::trace_span span("program", options_.name);
  if (span.on()) {
    span.arg("key", cache_key_->hex().substr(0, 16));
    span.arg("target", to_string(target));
  }
  // The output depends on what no key names (the clock), or the compile writes files: without the
  // cache (cache_outcome::off), the skip counted.
  if (const auto& bypass = cache_key_->bypass()) {
    cucore::log(log_level::info,
                "not using the " + cache->description() + " cache: " + bypass->why);
    if (const auto stats = cache->statistics()) stats->record_skip(bypass->reason);
    span.arg("outcome", "bypass");
    detail::trace_span compiling("compiler", "compile");
    return compile_uncached(target, name_expressions);
  }
  // Single-flight: on a miss, one of the processes and threads missing this key compiles and
  // the others wait for its entry (cache/single_flight.hpp).
  // What the compile read is observed: stored only if the key covers all of it.
  detail::observed_inputs seen = detail::unobserved_compile();
  // Where this cache keeps its programs' notes: asked on a miss only (a hit pays nothing).
  const auto notes = [cache]() -> std::optional<std::filesystem::path> {
    const auto stats = cache->statistics();
    return stats ? std::optional(stats->directory()) : std::nullopt;
  };
  auto compile = [&] {
    explain_miss(notes(), *cache);
    detail::trace_span compiling("compiler", "compile");
    if (miss_explanation_) compiling.arg("miss", to_string(miss_explanation_->kind()));
    return detail::run_observed(seen, [&] { return compile_uncached(target, name_expressions); });
  };
  auto store = [&](const object_code& compiled) {
    detail::trace_span storing("cache", "store");
    // NVRTC read the headers after the key was made: stored only if each is still the file the
    // key hashed, and was settled then, and it read nothing else the key does not cover
    // (program_cache_key::check_store).
    if (auto refusal = cache_key_->check_store(seen, compiled.code())) {
      cucore::log(log_level::warning, "not storing the compiled program in the " +
                                          cache->description() + " cache: " + refusal->message);
      if (const auto stats = cache->statistics()) stats->record_skip(refusal->reason);
      store_refusal_ = std::move(refusal);
      return;
    }
    try {
      cache->put(*cache_key_, compiled);
      stored_ = true;
      detail::record_program_note(notes(), cache_key_->hex(), cache_key_->explain(),
                                  encoded_fields_);
      // What `cucore cache verify --recompile` compiles again (only where recipes are on).
      if (key_inputs) {
        detail::record_program_recipe(notes(), cache_key_->hex(), *key_inputs);
      } else {
        detail::record_program_recipe(notes(), cache_key_->hex(), code_, type_, options_, target,
                                      name_expressions);
      }
    } catch (const std::exception& e) {
      // The compile succeeded; a cache that cannot store it only costs a later recompile.
      cucore::log(log_level::warning, "could not store the compiled program in the " +
                                          cache->description() + " cache: " + e.what());
    }
  };
  cache_outcome_ = cache_outcome::miss;  // unless a get below finds it
  const auto header_memo = compiler_probes_for(*cache).header_digest_memo();
  const cache_header_memo_scope memo_scope(&header_memo);
  flight_result result = get_or_compile(*cache, *cache_key_, compile, store);
  flight_outcome_ = result.outcome;
  cache_outcome_ = result.from_cache() ? cache_outcome::hit : cache_outcome::miss;
  span.arg("outcome", to_string(result.outcome));
  if (result.from_cache()) {
    if (const double rate = detail::verify_rate(options_); detail::sampled(rate)) {
      // Rate 1 (every hit, CI's "verified" suites): on this thread, the fresh bytes returned on a
      // mismatch. Below 1: in the background, the hit returned now.
      if (!options_.verify_in_background.value_or(rate < 1.0)) {
        return verify_hit(target, name_expressions, *cache, std::move(result.code));
      }
      try {  // a check that cannot be queued (no thread, no memory) never fails the hit
        queue_hit_check(target, name_expressions, *cache, result.code, key_inputs);
      } catch (const std::exception& e) {
        cucore::log(log_level::debug, std::string("verify: a sampled hit not queued: ") + e.what());
      }
    }
  }
  return std::move(result.code);
}

// A miss explains itself (docs/cache-keys.md, "Misses that explain themselves"): what differs
// from the last key stored for this program, said at debug level and counted by kind. Asked only
// where this process compiles: a hit pays nothing.
void program::explain_miss(const std::optional<std::filesystem::path>& notes,
                           program_cache& cache) {
  const auto& fields = cache_key_->explain();
  if (fields.empty()) return;  // a key made from a digest: nothing to compare
  const auto nearest = detail::nearest_program_note(notes, fields);
  encoded_fields_ = detail::encode_fields(fields);
  miss_explanation_ = detail::explain_miss(nearest ? std::string_view(nearest->fields) : "",
                                           nearest ? nearest->key_hex : "", encoded_fields_);
  if (const auto stats = cache.statistics()) stats->record_miss(miss_explanation_->kind());
  std::string text;
  for (const auto& r : miss_explanation_->reasons) {
    text += (text.empty() ? "" : "; ") + std::string(to_string(r.kind)) + ": " + r.detail;
  }
  cucore::log(log_level::debug,
              "miss " + options_.name + " (" + cache_key_->hex().substr(0, 16) + "): " + text);
}

object_code program::compile_uncached(code_type target,
                                      std::span<const std::string> name_expressions) {
  switch (type_) {
    case source_type::cxx:
      return compile_nvrtc(target, name_expressions);
    case source_type::nvvm:
      return compile_nvvm(target);
    case source_type::ptx:
      return compile_ptx(target);
  }
  throw invalid_argument("unknown source type");
}

object_code program::compile_nvrtc(code_type target,
                                   std::span<const std::string> name_expressions) {
  const auto& api = detail::nvrtc("compiling CUDA C++ (program with source_type c++)");
  if (target == code_type::tile_ir &&
      (api.nvrtcGetTileIRSize == nullptr || api.nvrtcGetTileIR == nullptr)) {
    throw invalid_argument(
        "the tile_ir target needs NVRTC 13.1 or newer (nvrtcGetTileIR); the "
        "loaded NVRTC is " +
        api.nvrtc_version.to_string() + ": point CUCORE_CUDA_HOME at a newer toolkit's root");
  }
  program_options options = options_;
  options.arch = resolve_arch(options.arch);
  const auto flags = compiler_flags(options, source_type::cxx, target);
  const bool wants_pch = options.pch.value_or(false) || options.create_pch.has_value();
  // The compile server (docs/compile-server.md): not for the caller's own PCH or options that
  // write files (they stay this process's), and only its own answer (else compiled here).
  if (!wants_pch && !options.use_pch && !options.pch_dir && !options.time &&
      !options.fdevice_time_trace) {
    if (const auto mode = server::effective_mode(options); mode != compile_server_mode::off) {
      detail::trace_span round_trip("server", "round trip");
      auto served =
          server::compile_through_server(mode, code_, options, flags, target, name_expressions);
      round_trip.arg("answered", served && served->compiled ? "compiled"
                                 : served                   ? "failed"
                                                            : "no");
      // An invalid option is reported here (it may name the arch), as a local compile would.
      if (served && (served->compiled || served->status != "NVRTC_ERROR_INVALID_OPTION")) {
        log_ = std::move(served->log);
        auto_pch_ = served->auto_pch;
        pch_status_ = served->pch;
        if (!served->compiled) throw compile_error(served->backend, served->status, log_);
        symbol_map symbols;
        for (std::size_t i = 0; i + 1 < served->symbols.size(); i += 2) {
          symbols.emplace(served->symbols[i], served->symbols[i + 1]);
        }
        const auto* data = reinterpret_cast<const std::byte*>(served->code.data());
        object_code out(target, std::vector<std::byte>(data, data + served->code.size()),
                        options.name, std::move(symbols));
        if (served->tile_ir) {
          const auto* tile = reinterpret_cast<const std::byte*>(served->tile_ir->data());
          out = out.with_tile_ir(object_code(
              code_type::tile_ir, std::vector<std::byte>(tile, tile + served->tile_ir->size()),
              options.name));
        }
        return out;
      }
    }
  }
  // NVRTC's PCH heap is one per process: a compile with the caller's PCH options holds it.
  std::unique_lock<std::mutex> pch_heap;
  if (wants_pch || options.use_pch || options.pch_dir) pch_heap = detail::lock_pch_heap();
  // cucore's automatic PCH (program/auto_pch.hpp): flags for NVRTC only, never for the key.
  detail::auto_pch_compile automatic(
      api, code_, options, target,
      t_cache_header_memo != nullptr ? *t_cache_header_memo : std::nullopt);
  bool plain_retry = false;

  // In-memory headers: NVRTC may keep the pointers, which point into options_ (owned here).
  std::vector<const char*> header_contents;
  std::vector<const char*> header_names;
  for (const auto& h : options_.headers) {
    header_contents.push_back(h.contents.c_str());
    header_names.push_back(h.name.c_str());
  }
  const int header_count = static_cast<int>(header_names.size());

  // Two attempts at most: the second only when the PCH heap was too small for the header, or when
  // compiling with an automatic PCH failed catastrophically (then without it).
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> all_flags = flags;
    all_flags.insert(all_flags.end(), automatic.flags().begin(), automatic.flags().end());
    auto argv = c_strings(all_flags);
    nvrtcProgram raw = nullptr;
    check_nvrtc(api,
                api.nvrtcCreateProgram(&raw, code_.c_str(), options.name.c_str(), header_count,
                                       header_count ? header_contents.data() : nullptr,
                                       header_count ? header_names.data() : nullptr),
                "nvrtcCreateProgram");
    detail::nvrtc_program prog(api, raw);
    for (const auto& expr : name_expressions) {
      if (expr.empty()) throw invalid_argument("a name expression is empty");
      check_nvrtc(api, api.nvrtcAddNameExpression(prog.get(), expr.c_str()),
                  "nvrtcAddNameExpression");
    }
    nvrtcResult result =
        api.nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
    log_ = nvrtc_log(api, prog.get());
    if (result != NVRTC_SUCCESS && automatic.failed(log_)) {
      auto_pch_ = automatic.status();
      plain_retry = true;
      continue;
    }
    auto_pch_ = automatic.status();
    if (result != NVRTC_SUCCESS) {
      if (result == NVRTC_ERROR_INVALID_OPTION) {
        detail::check_nvrtc_supports_arch(api, *options.arch);  // names the arch if that was it
      }
      throw compile_error("NVRTC", api.nvrtcGetErrorString(result), log_);
    }

    if (plain_retry) automatic.retry_succeeded();
    if (automatic.succeeded(prog.get(), log_)) {  // NVRTC's log speaks of PCH: again without
      auto_pch_ = automatic.status();
      continue;
    }
    auto_pch_ = automatic.status();
    if (wants_pch) {
      nvrtcResult pch = api.nvrtcGetPCHCreateStatus(prog.get());
      if (pch == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED && attempt == 0) {
        std::size_t required = 0;
        check_nvrtc(api, api.nvrtcGetPCHHeapSizeRequired(prog.get(), &required),
                    "nvrtcGetPCHHeapSizeRequired");
        detail::resize_pch_heap(api, required);
        continue;
      }
      pch_status_ = pch == NVRTC_SUCCESS                         ? pch_status::created
                    : pch == NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED ? pch_status::not_attempted
                                                                 : pch_status::failed;
    }

    symbol_map symbols;
    for (const auto& expr : name_expressions) {
      const char* lowered = nullptr;
      check_nvrtc(api, api.nvrtcGetLoweredName(prog.get(), expr.c_str(), &lowered),
                  "nvrtcGetLoweredName");
      symbols.emplace(expr, lowered);
    }
    // A success with no bytes of the target is no result (-tile-only: an empty PTX, and the
    // cubin and LTO-IR getters fail): an error naming the option that caused it, never an empty
    // object for the cache to keep. Asked for no code (--fdevice-syntax-only), it is what was
    // asked.
    std::vector<std::byte> bytes;
    try {
      bytes = nvrtc_output(api, prog.get(), target);
    } catch (const error&) {
      const std::string cause = detail::empty_output_cause(flags, to_string(target));
      if (cause.empty()) throw;
      throw compile_error("NVRTC", cause, log_);
    }
    if (bytes.empty() && !options.fdevice_syntax_only.value_or(false)) {
      std::string cause = detail::empty_output_cause(flags, to_string(target));
      if (cause.empty()) {
        cause = "NVRTC reported success but produced no " + std::string(to_string(target)) +
                " for these options";
      }
      throw compile_error("NVRTC", cause, log_);
    }
    object_code out(target, std::move(bytes), options.name, std::move(symbols));
    // Tile code's own output, from the same compile: carried alongside the PTX, cubin or LTO-IR
    // (and cached in its entry), so a mixed program needs one compile for both.
    if (target != code_type::tile_ir && detail::compiles_tile_code(flags) &&
        api.nvrtcGetTileIRSize != nullptr && api.nvrtcGetTileIR != nullptr) {
      std::vector<std::byte> tile = nvrtc_output(api, prog.get(), code_type::tile_ir);
      if (!tile.empty()) {
        out = out.with_tile_ir(object_code(code_type::tile_ir, std::move(tile), options.name));
      }
    }
    return out;
  }
}

object_code program::compile_nvvm(code_type target) {
  const auto& api = detail::nvvm("compiling NVVM IR (program with source_type nvvm)");
  program_options options = options_;
  options.arch = resolve_arch(options.arch);
  const auto flags = compiler_flags(options, source_type::nvvm, target);
  auto argv = c_strings(flags);

  // Declared before the program handle so it outlives it: NVVM may keep the lazy module's pointer.
  std::vector<char> libdevice;
  if (options.use_libdevice.value_or(false)) libdevice = read_file(toolkit::libdevice_path());

  nvvmProgram raw = nullptr;
  check_nvvm(api, api.nvvmCreateProgram(&raw), "nvvmCreateProgram");
  detail::nvvm_program prog(api, raw);
  check_nvvm(
      api, api.nvvmAddModuleToProgram(prog.get(), code_.data(), code_.size(), options.name.c_str()),
      "nvvmAddModuleToProgram");
  for (const auto& module : options.extra_sources) {
    check_nvvm(api,
               api.nvvmAddModuleToProgram(prog.get(), module.code.data(), module.code.size(),
                                          module.name.c_str()),
               "nvvmAddModuleToProgram");
  }
  if (!libdevice.empty()) {
    check_nvvm(
        api,
        api.nvvmLazyAddModuleToProgram(prog.get(), libdevice.data(), libdevice.size(), "libdevice"),
        "nvvmLazyAddModuleToProgram");
  }
  const int argc = static_cast<int>(argv.size());
  nvvmResult result = api.nvvmVerifyProgram(prog.get(), argc, argv.data());
  if (result == NVVM_SUCCESS) result = api.nvvmCompileProgram(prog.get(), argc, argv.data());
  log_ = nvvm_log(api, prog.get());
  if (result != NVVM_SUCCESS) throw compile_error("NVVM", api.nvvmGetErrorString(result), log_);

  std::size_t size = 0;
  check_nvvm(api, api.nvvmGetCompiledResultSize(prog.get(), &size), "nvvmGetCompiledResultSize");
  std::vector<std::byte> out(size);
  check_nvvm(api, api.nvvmGetCompiledResult(prog.get(), reinterpret_cast<char*>(out.data())),
             "nvvmGetCompiledResult");
  if (target == code_type::ptx) {
    while (!out.empty() && out.back() == std::byte{0}) out.pop_back();
  }
  return object_code(target, std::move(out), options.name);
}

object_code program::compile_ptx(code_type target) {
  linker_options link_options = to_linker_options(options_);
  linker link({object_code::from_ptx(code_, options_.name)}, std::move(link_options));
  try {
    auto result = link.link(target);
    log_ = link.log();
    return result;
  } catch (...) {
    log_ = link.log();
    throw;
  }
}

std::size_t nvrtc_pch_heap_size() {
  const auto& api = detail::nvrtc("querying the NVRTC PCH heap size");
  std::size_t size = 0;
  check_nvrtc(api, api.nvrtcGetPCHHeapSize(&size), "nvrtcGetPCHHeapSize");
  return size;
}

void set_nvrtc_pch_heap_size(std::size_t bytes) {
  const auto& api = detail::nvrtc("setting the NVRTC PCH heap size");
  const auto heap = detail::lock_pch_heap();
  detail::resize_pch_heap(api, bytes);
}

}  // namespace cucore
