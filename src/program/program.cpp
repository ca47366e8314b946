#include "cucore/program.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>

#include "common/enum_names.hpp"
#include "cucore/error.hpp"
#include "cucore/linker.hpp"
#include "cucore/toolkit.hpp"
#include "program/compiler_handles.hpp"
#include "program/nvrtc_option_table.hpp"
#include "program/nvrtc_services.hpp"
#include "program/pch_heap.hpp"

namespace cucore {
namespace {

using detail::c_strings;

std::string nvrtc_log(const detail::nvrtc_api& api, nvrtcProgram prog) {
  return detail::read_log(prog, api.nvrtcGetProgramLogSize, api.nvrtcGetProgramLog, NVRTC_SUCCESS);
}

void check_nvrtc(const detail::nvrtc_api& api, nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) throw library_error("NVRTC", call, api.nvrtcGetErrorString(r));
}

void check_nvvm(const detail::nvvm_api& api, nvvmResult r, const char* call) {
  if (r != NVVM_SUCCESS) throw library_error("libNVVM", call, api.nvvmGetErrorString(r));
}

std::string nvvm_log(const detail::nvvm_api& api, nvvmProgram prog) {
  return detail::read_log(prog, api.nvvmGetProgramLogSize, api.nvvmGetProgramLog, NVVM_SUCCESS);
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

constexpr auto kPchStatusNames =
    detail::name_each<pch_status::failed>("not_requested", "created", "not_attempted", "failed");

std::string_view to_string(pch_status status) noexcept {
  return kPchStatusNames(status);
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

object_code program::compile_uncached(code_type target,
                                      std::span<const std::string> name_expressions,
                                      detail::nvrtc_services* services) {
  switch (type_) {
    case source_type::cxx:
      return compile_nvrtc(target, name_expressions, services);
    case source_type::nvvm:
      return compile_nvvm(target);
    case source_type::ptx:
      return compile_ptx(target);
  }
  throw invalid_argument("unknown source type");
}

object_code program::compile_nvrtc(code_type target, std::span<const std::string> name_expressions,
                                   detail::nvrtc_services* services) {
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
  // Elsewhere (the compile server, docs/compile-server.md): not for the caller's own PCH or
  // options that write files (they stay this process's), and only its own answer (else compiled
  // here).
  if (services != nullptr && !wants_pch && !options.use_pch && !options.pch_dir && !options.time &&
      !options.fdevice_time_trace) {
    auto served = services->compile_elsewhere(code_, options, flags, target, name_expressions);
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
      object_code out(target, std::move(served->code), options.name, std::move(symbols));
      if (served->tile_ir) {
        out = out.with_tile_ir(
            object_code(code_type::tile_ir, std::move(*served->tile_ir), options.name));
      }
      return out;
    }
  }
  // NVRTC's PCH heap is one per process: a compile with the caller's PCH options holds it.
  std::unique_lock<std::mutex> pch_heap;
  if (wants_pch || options.use_pch || options.pch_dir) pch_heap = detail::lock_pch_heap();
  // cucore's automatic PCH (pch/auto_pch.hpp), where lent: flags for NVRTC only, never for a key.
  const std::unique_ptr<detail::nvrtc_pch_session> automatic =
      services != nullptr ? services->automatic_pch(api, code_, options, target) : nullptr;
  static const std::vector<std::string> no_flags;
  const std::vector<std::string>& pch_flags = automatic ? automatic->flags() : no_flags;
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
    all_flags.insert(all_flags.end(), pch_flags.begin(), pch_flags.end());
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
    const auto automatic_status = [&] {
      return automatic ? automatic->status() : auto_pch_status::off;
    };
    if (result != NVRTC_SUCCESS && automatic && automatic->failed(log_)) {
      auto_pch_ = automatic_status();
      plain_retry = true;
      continue;
    }
    auto_pch_ = automatic_status();
    if (result != NVRTC_SUCCESS) {
      if (result == NVRTC_ERROR_INVALID_OPTION) {
        detail::check_nvrtc_supports_arch(api, *options.arch);  // names the arch if that was it
      }
      throw compile_error("NVRTC", api.nvrtcGetErrorString(result), log_);
    }

    if (plain_retry && automatic) automatic->retry_succeeded();
    if (automatic && automatic->succeeded(prog.get(), log_)) {  // its log speaks of PCH: again
      auto_pch_ = automatic_status();
      continue;
    }
    auto_pch_ = automatic_status();
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
