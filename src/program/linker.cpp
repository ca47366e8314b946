#include "cucore/linker.hpp"

#include <array>
#include <cctype>

#include "cucore/error.hpp"
#include "cucore/toolkit.hpp"
#include "program/compiler_handles.hpp"

namespace cucore {
namespace {

using detail::c_strings;

constexpr const char* kTileIrNotLinked =
    "Tile IR is not a linker input (nvJitLink and the driver linker take PTX, cubin, LTO-IR, "
    "fatbin, object and library code): load it with the driver, or link the program's PTX or cubin";

nvJitLinkInputType nvjitlink_input(code_type type) {
  switch (type) {
    case code_type::ptx:
      return NVJITLINK_INPUT_PTX;
    case code_type::cubin:
      return NVJITLINK_INPUT_CUBIN;
    case code_type::ltoir:
      return NVJITLINK_INPUT_LTOIR;
    case code_type::fatbin:
      return NVJITLINK_INPUT_FATBIN;
    case code_type::object:
      return NVJITLINK_INPUT_OBJECT;
    case code_type::library:
      return NVJITLINK_INPUT_LIBRARY;
    case code_type::tile_ir:
      throw invalid_argument(kTileIrNotLinked);
  }
  return NVJITLINK_INPUT_ANY;
}

std::string nvjitlink_status(nvJitLinkResult r) {
  static constexpr std::array<const char*, 20> names = {
      "NVJITLINK_SUCCESS",
      "NVJITLINK_ERROR_UNRECOGNIZED_OPTION",
      "NVJITLINK_ERROR_MISSING_ARCH",
      "NVJITLINK_ERROR_INVALID_INPUT",
      "NVJITLINK_ERROR_PTX_COMPILE",
      "NVJITLINK_ERROR_NVVM_COMPILE",
      "NVJITLINK_ERROR_INTERNAL",
      "NVJITLINK_ERROR_THREADPOOL",
      "NVJITLINK_ERROR_UNRECOGNIZED_INPUT",
      "NVJITLINK_ERROR_FINALIZE",
      "NVJITLINK_ERROR_NULL_INPUT",
      "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
      "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE",
      "NVJITLINK_ERROR_ARCH_MISMATCH",
      "NVJITLINK_ERROR_OUTDATED_LIBRARY",
      "NVJITLINK_ERROR_MISSING_FATBIN",
      "NVJITLINK_ERROR_UNRECOGNIZED_ARCH",
      "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
      "NVJITLINK_ERROR_LTO_NOT_ENABLED",
      "",
  };
  auto i = static_cast<std::size_t>(r);
  if (i < names.size() && names[i][0] != '\0') return names[i];
  return "nvJitLink error " + std::to_string(static_cast<int>(r));
}

std::string nvjitlink_logs(const detail::nvjitlink_api& api, nvJitLinkHandle h) {
  std::string out;
  auto append = [&](auto size_fn, auto get_fn) {
    const std::string log = detail::read_log(h, size_fn, get_fn, NVJITLINK_SUCCESS);
    if (log.empty()) return;
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += log;
  };
  append(api.nvJitLinkGetErrorLogSize, api.nvJitLinkGetErrorLog);
  append(api.nvJitLinkGetInfoLogSize, api.nvJitLinkGetInfoLog);
  return out;
}

std::string input_name(const object_code& input) {
  return input.name().empty() ? std::string(to_string(input.type())) : input.name();
}

// The bytes a linker is given: PTX must be NUL-terminated (object_code holds the text only).
std::vector<std::byte> linker_input_bytes(const object_code& input) {
  std::vector<std::byte> data(input.code().begin(), input.code().end());
  if (input.type() == code_type::ptx) data.push_back(std::byte{0});
  return data;
}

void check_link_target(code_type target) {
  if (target != code_type::cubin && target != code_type::ptx && target != code_type::ltoir) {
    throw invalid_argument("unsupported link target \"" + std::string(to_string(target)) +
                           "\": a linker produces cubin, ptx or ltoir (nvJitLink 13.3+)");
  }
}

// What a loaded nvJitLink cannot do, refused by name before it silently does something else.
void check_nvjitlink_features(const detail::nvjitlink_api& api, const linker_options& options,
                              code_type target) {
  const bool linked_ltoir = api.nvJitLinkGetLinkedLTOIR != nullptr;
  const std::string which =
      "nvJitLink " + api.nvjitlink_version.to_string() + " (" + api.library->path() + ")";
  if (target == code_type::ltoir && !linked_ltoir) {
    throw invalid_argument(
        "linking to ltoir needs nvJitLink 13.3 or newer "
        "(nvJitLinkGetLinkedLTOIR), but " +
        which + " lacks it: link to cubin or ptx, or use a newer nvJitLink");
  }
  if (options.relocatable.value_or(false) && options.link_time_optimization.value_or(false) &&
      !linked_ltoir) {
    throw invalid_argument(
        "linker_options::relocatable with link_time_optimization needs "
        "nvJitLink 13.3 or newer: " +
        which +
        " ignores -r under -lto and links an executable cubin; drop one of "
        "them or use a newer nvJitLink");
  }
}

// "sm_90a" → CU_TARGET_COMPUTE_90A
CUjit_target driver_target(const std::string& arch) {
  std::size_t i = arch.find('_') + 1;
  int number = 0;
  while (i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i]))) {
    number = number * 10 + (arch[i++] - '0');
  }
  if (i < arch.size() && arch[i] == 'a') number += CU_COMPUTE_ACCELERATED_TARGET_BASE;
  if (i < arch.size() && arch[i] == 'f') number += CU_COMPUTE_FAMILY_TARGET_BASE;
  return static_cast<CUjit_target>(number);
}

CUjitInputType driver_input(code_type type) {
  switch (type) {
    case code_type::ptx:
      return CU_JIT_INPUT_PTX;
    case code_type::cubin:
      return CU_JIT_INPUT_CUBIN;
    case code_type::fatbin:
      return CU_JIT_INPUT_FATBINARY;
    case code_type::object:
      return CU_JIT_INPUT_OBJECT;
    case code_type::library:
      return CU_JIT_INPUT_LIBRARY;
    case code_type::tile_ir:
      throw invalid_argument(kTileIrNotLinked);
    case code_type::ltoir:
      break;
  }
  throw invalid_argument(
      "the driver linker cannot link LTO-IR: install nvJitLink (CUDA 12.3 or newer) or link PTX");
}

// The device's primary context, current for the scope (cuLink* needs a context).
class scoped_primary_context {
 public:
  explicit scoped_primary_context(const detail::driver_api& api) : api_(api) {
    CUcontext current = nullptr;
    if (api.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != nullptr) return;
    detail::check_driver(api.cuDeviceGet(&device_, 0), "cuDeviceGet");
    detail::check_driver(api.cuDevicePrimaryCtxRetain(&context_, device_),
                         "cuDevicePrimaryCtxRetain");
    if (CUresult r = api.cuCtxPushCurrent(context_); r != CUDA_SUCCESS) {
      api.cuDevicePrimaryCtxRelease(device_);
      detail::check_driver(r, "cuCtxPushCurrent");
    }
  }
  scoped_primary_context(const scoped_primary_context&) = delete;
  scoped_primary_context& operator=(const scoped_primary_context&) = delete;
  ~scoped_primary_context() {
    if (context_ == nullptr) return;
    CUcontext popped = nullptr;
    api_.cuCtxPopCurrent(&popped);
    api_.cuDevicePrimaryCtxRelease(device_);
  }

 private:
  const detail::driver_api& api_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

class driver_link_state {
 public:
  explicit driver_link_state(const detail::driver_api& api) : api_(api) {}
  driver_link_state(const driver_link_state&) = delete;
  driver_link_state& operator=(const driver_link_state&) = delete;
  ~driver_link_state() {
    if (state_ != nullptr) api_.cuLinkDestroy(state_);
  }
  CUlinkState* out() noexcept { return &state_; }
  CUlinkState get() const noexcept { return state_; }

 private:
  const detail::driver_api& api_;
  CUlinkState state_ = nullptr;
};

}  // namespace

std::string_view to_string(linker_backend backend) noexcept {
  return backend == linker_backend::nvjitlink ? "nvJitLink" : "driver";
}

linker_backend linker::which_backend() {
  static const linker_backend backend =
      detail::nvjitlink_table().api ? linker_backend::nvjitlink : linker_backend::driver;
  return backend;
}

linker::linker(std::vector<object_code> inputs, linker_options options)
    : inputs_(std::move(inputs)), options_(std::move(options)), backend_(which_backend()) {
  if (inputs_.empty()) throw invalid_argument("linker needs at least one object_code to link");
}

object_code linker::link(code_type target) {
  check_link_target(target);
  log_.clear();
  return backend_ == linker_backend::nvjitlink ? link_nvjitlink(target) : link_driver(target);
}

object_code linker::link_nvjitlink(code_type target) {
  const auto& api = detail::nvjitlink("linking with nvJitLink");
  linker_options options = options_;
  options.arch = resolve_arch(options.arch);
  if (target == code_type::ptx) options.ptx = true;
  // Linked LTO-IR exists only under -lto, as NVRTC's ltoir target adds -dlto.
  if (target == code_type::ltoir) options.link_time_optimization = true;
  check_nvjitlink_features(api, options, target);
  const auto flags = nvjitlink_flags(options);
  auto argv = c_strings(flags);

  nvJitLinkHandle raw = nullptr;
  nvJitLinkResult r = api.nvJitLinkCreate(&raw, static_cast<uint32_t>(argv.size()), argv.data());
  if (r != NVJITLINK_SUCCESS) {
    // Creation fails on bad options; there is no handle to read a log from.
    throw compile_error(
        "nvJitLink", nvjitlink_status(r), "nvJitLinkCreate rejected the options: " + [&] {
          std::string all;
          for (const auto& f : flags) all += (all.empty() ? "" : " ") + f;
          return all;
        }());
  }
  detail::nvjitlink_handle handle(api, raw);
  for (const auto& input : inputs_) {
    const std::string name = input_name(input);
    const auto data = linker_input_bytes(input);
    r = api.nvJitLinkAddData(handle.get(), nvjitlink_input(input.type()), data.data(), data.size(),
                             name.c_str());
    if (r != NVJITLINK_SUCCESS) {
      log_ = nvjitlink_logs(api, handle.get());
      throw compile_error("nvJitLink", nvjitlink_status(r) + " adding " + name, log_);
    }
  }
  r = api.nvJitLinkComplete(handle.get());
  log_ = nvjitlink_logs(api, handle.get());
  if (r != NVJITLINK_SUCCESS) throw compile_error("nvJitLink", nvjitlink_status(r), log_);

  std::size_t size = 0;
  std::vector<std::byte> out;
  if (target == code_type::cubin) {
    r = api.nvJitLinkGetLinkedCubinSize(handle.get(), &size);
    if (r == NVJITLINK_SUCCESS) {
      out.resize(size);
      r = api.nvJitLinkGetLinkedCubin(handle.get(), out.data());
    }
  } else if (target == code_type::ltoir) {
    r = api.nvJitLinkGetLinkedLTOIRSize(handle.get(), &size);
    if (r == NVJITLINK_SUCCESS) {
      out.resize(size);
      r = api.nvJitLinkGetLinkedLTOIR(handle.get(), out.data());
    }
  } else {
    r = api.nvJitLinkGetLinkedPtxSize(handle.get(), &size);
    if (r == NVJITLINK_SUCCESS) {
      out.resize(size);
      r = api.nvJitLinkGetLinkedPtx(handle.get(), reinterpret_cast<char*>(out.data()));
    }
    while (!out.empty() && out.back() == std::byte{0}) out.pop_back();
  }
  if (r != NVJITLINK_SUCCESS) {
    throw library_error("nvJitLink", "reading the linked output", nvjitlink_status(r));
  }
  return object_code(target, std::move(out), options.name);
}

object_code linker::link_driver(code_type target) {
  const auto& o = options_;
  if (target != code_type::cubin) {
    throw invalid_argument("the driver linker only produces cubin; install nvJitLink to link to " +
                           std::string(to_string(target)));
  }
  std::string refused;
  auto refuse = [&](bool set, const char* name) {
    if (set) refused += (refused.empty() ? "" : ", ") + std::string(name);
  };
  refuse(o.time.has_value(), "time");
  refuse(o.ptx.has_value(), "ptx");
  refuse(o.relocatable.has_value(), "relocatable");
  refuse(!o.ptxas_options.empty(), "ptxas_options");
  refuse(o.split_compile.has_value(), "split_compile");
  refuse(o.split_compile_extended.has_value(), "split_compile_extended");
  if (!refused.empty()) {
    throw invalid_argument(
        "linker_options not supported by the driver linker (nvJitLink is not "
        "available): " +
        refused + ". Install nvJitLink or drop them.");
  }
  const auto& nvjitlink_status = detail::nvjitlink_table().status;
  const auto& api = detail::driver(
      "linking with the driver linker, because nvJitLink is not available (" +
      nvjitlink_status.error + "; searched " + std::to_string(nvjitlink_status.searched.size()) +
      " places, see `cucore info`)");
  scoped_primary_context context(api);

  constexpr std::size_t kLogSize = 1 << 22;
  std::vector<char> info_log(kLogSize, '\0');
  std::vector<char> error_log(kLogSize, '\0');
  std::vector<CUjit_option> keys = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                                    CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  std::vector<void*> values = {info_log.data(), reinterpret_cast<void*>(kLogSize), error_log.data(),
                               reinterpret_cast<void*>(kLogSize)};
  auto set = [&](CUjit_option key, std::uintptr_t value) {
    keys.push_back(key);
    values.push_back(reinterpret_cast<void*>(value));
  };
  if (o.arch) set(CU_JIT_TARGET, driver_target(resolve_arch(o.arch)));
  if (o.max_register_count) set(CU_JIT_MAX_REGISTERS, static_cast<unsigned>(*o.max_register_count));
  if (o.verbose.value_or(false)) set(CU_JIT_LOG_VERBOSE, 1);
  if (o.link_time_optimization.value_or(false)) set(CU_JIT_LTO, 1);
  if (o.optimization_level)
    set(CU_JIT_OPTIMIZATION_LEVEL, static_cast<unsigned>(*o.optimization_level));
  if (o.debug.value_or(false)) set(CU_JIT_GENERATE_DEBUG_INFO, 1);
  if (o.lineinfo.value_or(false)) set(CU_JIT_GENERATE_LINE_INFO, 1);
  if (o.no_cache.value_or(false)) set(CU_JIT_CACHE_MODE, CU_JIT_CACHE_OPTION_NONE);

  driver_link_state state(api);
  detail::check_driver(
      api.cuLinkCreate(static_cast<unsigned>(keys.size()), keys.data(), values.data(), state.out()),
      "cuLinkCreate");
  auto logs = [&] {
    std::string log = error_log.data();
    std::string info = info_log.data();
    if (!info.empty()) log += (log.empty() ? "" : "\n") + info;
    return log;
  };
  for (const auto& input : inputs_) {
    const std::string name = input_name(input);
    auto data = linker_input_bytes(input);
    CUresult r = api.cuLinkAddData(state.get(), driver_input(input.type()), data.data(),
                                   data.size(), name.c_str(), 0, nullptr, nullptr);
    if (r != CUDA_SUCCESS) {
      log_ = logs();
      const char* err = nullptr;
      api.cuGetErrorName(r, &err);
      throw compile_error("driver", std::string(err ? err : "error") + " adding " + name, log_);
    }
  }
  void* cubin = nullptr;
  std::size_t size = 0;
  CUresult r = api.cuLinkComplete(state.get(), &cubin, &size);
  log_ = logs();
  if (r != CUDA_SUCCESS) {
    const char* err = nullptr;
    api.cuGetErrorName(r, &err);
    throw compile_error("driver", err ? err : "error", log_);
  }
  // The cubin belongs to the link state: copy it before the state is destroyed.
  auto* first = static_cast<const std::byte*>(cubin);
  return object_code(code_type::cubin, std::vector<std::byte>(first, first + size), o.name);
}

}  // namespace cucore
