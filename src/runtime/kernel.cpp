#include "cucore/runtime/kernel.hpp"

#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "cucore/error.hpp"
#include "runtime/runtime.hpp"

namespace cucore {
namespace detail {

// The loaded library (cuLibraryLoadData); unloaded when the object_code and every kernel are gone.
struct library_state {
  CUlibrary handle = nullptr;
  // Parameter lists by symbol, asked once per library (the probe past the last parameter is an
  // API error that compute-sanitizer reports). Entries are never erased: references stay valid.
  struct parameter_list {
    CUresult error = CUDA_SUCCESS;
    std::vector<kernel_parameter> parameters;
  };
  mutable std::mutex mutex;
  mutable std::map<std::string, parameter_list, std::less<>> parameters;

  library_state() = default;
  library_state(const library_state&) = delete;
  library_state& operator=(const library_state&) = delete;
  ~library_state() {
    if (handle == nullptr || !detail::driver_alive()) return;
    if (CUresult r = detail::driver_table().api->cuLibraryUnload(handle); r != CUDA_SUCCESS) {
      detail::log_driver_failure(r, "cuLibraryUnload");
    }
  }
};

}  // namespace detail

namespace {

constexpr std::string_view kFeature = "loading and launching kernels";
// Far above what a kernel can take (32 KiB of parameters): a stop for a misbehaving driver.
constexpr std::size_t kMaxParameters = 1 << 15;

[[noreturn]] void throw_driver(CUresult result, const char* call, const std::string& what) {
  const char* name = nullptr;
  if (const auto& table = detail::driver_table(); table.api) {
    table.api->cuGetErrorName(result, &name);
  }
  throw cuda_error(static_cast<int>(result), name ? name : "CUDA_ERROR_UNKNOWN", call, what);
}

std::string describe(const object_code& code) {
  std::string text = std::string(to_string(code.type())) + " object_code";
  if (!code.name().empty()) text += " \"" + code.name() + "\"";
  return text;
}

std::shared_ptr<const detail::library_state> load_library(const detail::driver_api& api,
                                                          const object_code& code) {
  const void* image = nullptr;
  std::string ptx;  // PTX must be NUL-terminated; the driver copies the image while loading
  switch (code.type()) {
    case code_type::ptx:
      ptx.assign(code.text());
      image = ptx.c_str();
      break;
    case code_type::cubin:
    case code_type::fatbin:
      image = code.code().data();
      break;
    default:
      throw invalid_argument("cannot load " + describe(code) +
                             " into the driver: get_kernel takes ptx, cubin or fatbin (link " +
                             std::string(to_string(code.type())) +
                             " to a cubin with cucore::linker first)");
  }
  if (code.size() == 0) throw invalid_argument("cannot load the empty " + describe(code));
  auto library = std::make_shared<detail::library_state>();
  CUresult r =
      api.cuLibraryLoadData(&library->handle, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (r != CUDA_SUCCESS) {
    library->handle = nullptr;
    throw_driver(r, "cuLibraryLoadData", "loading " + describe(code));
  }
  return library;
}

}  // namespace

struct kernel::state {
  std::shared_ptr<const detail::library_state> library;
  CUkernel handle = nullptr;
  std::string name;
  std::string symbol;
  // The library's entry for `symbol`, once asked: every launch and graph node checks its
  // arguments against it, so later calls read it without the library's lock (entries are never
  // erased, and the library lives as long as this state).
  mutable std::atomic<const detail::library_state::parameter_list*> parameters{nullptr};
};

kernel object_code::get_kernel(std::string_view name_or_expression) const {
  const auto& api = detail::runtime_driver(kFeature);
  std::shared_ptr<const detail::library_state> library;
  {
    std::lock_guard lock(state_->loaded.mutex);
    if (!state_->loaded.library) state_->loaded.library = load_library(api, *this);
    library = std::static_pointer_cast<const detail::library_state>(state_->loaded.library);
  }
  auto s = std::make_shared<kernel::state>();
  s->library = std::move(library);
  s->name = std::string(name_or_expression);
  s->symbol = std::string(symbol(name_or_expression));
  CUresult r = api.cuLibraryGetKernel(&s->handle, s->library->handle, s->symbol.c_str());
  if (r != CUDA_SUCCESS) {
    std::string detail = "no kernel \"" + s->symbol + "\" in " + describe(*this);
    if (s->symbol == s->name && symbol_mapping().find(s->name) == symbol_mapping().end()) {
      detail +=
          "; a C++ kernel is found by its mangled name: compile with the name expression "
          "(program::compile(target, {\"" +
          s->name + "\"})) or declare it extern \"C\"";
    }
    throw_driver(r, "cuLibraryGetKernel", detail);
  }
  return kernel(std::move(s));
}

const std::string& kernel::name() const {
  if (!state_) detail::throw_empty("kernel");
  return state_->name;
}

const std::string& kernel::symbol() const {
  if (!state_) detail::throw_empty("kernel");
  return state_->symbol;
}

CUkern_st* kernel::handle() const {
  if (!state_) detail::throw_empty("kernel");
  return state_->handle;
}

int kernel::attribute(int cu_function_attribute, const device& dev) const {
  CUkernel k = handle();
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, dev.ordinal());
  int value = 0;
  detail::check_driver(
      api.cuKernelGetAttribute(&value, static_cast<CUfunction_attribute>(cu_function_attribute), k,
                               detail::device_at(dev.ordinal()).handle),
      "cuKernelGetAttribute");
  return value;
}

kernel_attributes kernel::attributes(const device& dev) const {
  kernel_attributes a;
  a.max_threads_per_block = attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
  a.shared_size_bytes = attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, dev);
  a.const_size_bytes = attribute(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, dev);
  a.local_size_bytes = attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, dev);
  a.num_regs = attribute(CU_FUNC_ATTRIBUTE_NUM_REGS, dev);
  a.ptx_version = attribute(CU_FUNC_ATTRIBUTE_PTX_VERSION, dev);
  a.binary_version = attribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION, dev);
  a.max_dynamic_shared_size_bytes = attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dev);
  return a;
}

void kernel::set_max_dynamic_shared_memory(std::size_t bytes, const device& dev) const {
  CUkernel k = handle();
  if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw invalid_argument("dynamic shared memory of " + std::to_string(bytes) +
                           " bytes is out of range");
  }
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, dev.ordinal());
  detail::check_driver(
      api.cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               static_cast<int>(bytes), k, detail::device_at(dev.ordinal()).handle),
      "cuKernelSetAttribute");
}

const std::vector<kernel_parameter>& kernel::parameters() const {
  if (!state_) detail::throw_empty("kernel");
  if (const auto* known = state_->parameters.load(std::memory_order_acquire)) {
    detail::check_driver(known->error, "cuKernelGetParamInfo");
    return known->parameters;
  }
  const detail::library_state& library = *state_->library;
  std::lock_guard lock(library.mutex);
  if (auto it = library.parameters.find(state_->symbol); it != library.parameters.end()) {
    state_->parameters.store(&it->second, std::memory_order_release);
    detail::check_driver(it->second.error, "cuKernelGetParamInfo");
    return it->second.parameters;
  }
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, device::current().ordinal());
  // cuKernelGetParamInfo, else (a driver that answers only for functions) cuFuncGetParamInfo on
  // the kernel's function in the current context. Past the last parameter both answer
  // CUDA_ERROR_INVALID_VALUE.
  CUfunction function = nullptr;
  auto query = [&](std::size_t i, kernel_parameter& p) {
    if (function != nullptr) return api.cuFuncGetParamInfo(function, i, &p.offset, &p.size);
    return api.cuKernelGetParamInfo(state_->handle, i, &p.offset, &p.size);
  };
  detail::library_state::parameter_list list;
  for (std::size_t i = 0; i < kMaxParameters; ++i) {
    kernel_parameter p;
    CUresult r = query(i, p);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE && i == 0 && function == nullptr &&
        api.cuKernelGetFunction(&function, state_->handle) == CUDA_SUCCESS) {
      r = query(i, p);
    }
    if (r == CUDA_ERROR_INVALID_VALUE) break;
    if (r != CUDA_SUCCESS) {
      list.error = r;
      list.parameters.clear();
      break;
    }
    list.parameters.push_back(p);
  }
  auto& stored = library.parameters.emplace(state_->symbol, std::move(list)).first->second;
  state_->parameters.store(&stored, std::memory_order_release);
  detail::check_driver(stored.error,
                       function != nullptr ? "cuFuncGetParamInfo" : "cuKernelGetParamInfo");
  return stored.parameters;
}

std::shared_ptr<const void> kernel::owner() const {
  if (!state_) detail::throw_empty("kernel");
  return state_;
}

bool operator==(const kernel& a, const kernel& b) noexcept {
  if (!a.state_ || !b.state_) return a.state_ == b.state_;
  return a.state_->handle == b.state_->handle;
}

}  // namespace cucore
