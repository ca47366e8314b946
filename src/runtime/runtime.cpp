#include "runtime/runtime.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore::detail {
namespace {

// Constant-initialized and trivially destructible: readable during and after static destruction.
constinit std::atomic<bool> alive{false};
// Releases in progress on cucore's own threads (background_release). With `alive`, a Dekker pair:
// both sides store then load, sequentially consistent, so either the release sees the driver gone
// or the guard sees the release and waits for it.
constinit std::atomic<int> releasing{0};

struct exit_guard {
  exit_guard() noexcept { alive.store(true, std::memory_order_seq_cst); }
  exit_guard(const exit_guard&) = delete;
  exit_guard& operator=(const exit_guard&) = delete;
  ~exit_guard() {
    alive.store(false, std::memory_order_seq_cst);
    // Bounded: a release stuck in the driver must not hang the exit.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (releasing.load(std::memory_order_seq_cst) != 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
};

struct device_table {
  std::vector<std::unique_ptr<device_state>> devices;
};

// Built once; leaked on purpose (see library_table).
const device_table& devices(const driver_api& api) {
  static const device_table* table = [&] {
    auto* t = new device_table;
    int count = 0;
    check_driver(api.cuDeviceGetCount(&count), "cuDeviceGetCount");
    for (int i = 0; i < count; ++i) {
      auto state = std::make_unique<device_state>();
      state->ordinal = i;
      check_driver(api.cuDeviceGet(&state->handle, i), "cuDeviceGet");
      t->devices.push_back(std::move(state));
    }
    return t;
  }();
  return *table;
}

}  // namespace

const driver_api& runtime_driver(std::string_view feature) {
  const driver_api& api = driver(feature);
  // Constructed after cuInit, so it is destroyed before whatever the driver registered for exit.
  static exit_guard guard;
  return api;
}

bool driver_alive() noexcept {
  return alive.load(std::memory_order_acquire);
}

background_release::background_release() noexcept {
  releasing.fetch_add(1, std::memory_order_seq_cst);
  ok_ = alive.load(std::memory_order_seq_cst);
}

background_release::~background_release() {
  releasing.fetch_sub(1, std::memory_order_seq_cst);
}

int runtime_device_count() {
  return static_cast<int>(devices(runtime_driver("the CUDA device runtime")).devices.size());
}

device_state& device_at(int ordinal) {
  const auto& table = devices(runtime_driver("the CUDA device runtime"));
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= table.devices.size()) {
    throw invalid_argument("device ordinal " + std::to_string(ordinal) + " is out of range: " +
                           std::to_string(table.devices.size()) + " CUDA device(s) present");
  }
  return *table.devices[static_cast<std::size_t>(ordinal)];
}

int ordinal_of(CUdevice handle) {
  const auto& table = devices(runtime_driver("the CUDA device runtime"));
  for (const auto& d : table.devices) {
    if (d->handle == handle) return d->ordinal;
  }
  throw invalid_argument("CUdevice " + std::to_string(handle) + " is not a device of this process");
}

CUcontext primary_context(int ordinal) {
  // Every scoped call asks: the answer for the first devices is read without the device table
  // (a primary context is retained once and never released, so it never changes).
  static std::array<std::atomic<CUcontext>, 64> known{};
  const bool cacheable = ordinal >= 0 && static_cast<std::size_t>(ordinal) < known.size();
  if (cacheable) {
    if (CUcontext ctx = known[static_cast<std::size_t>(ordinal)].load(std::memory_order_acquire))
      return ctx;
  }
  device_state& state = device_at(ordinal);
  if (CUcontext ctx = state.primary.load(std::memory_order_acquire)) {
    if (cacheable) known[static_cast<std::size_t>(ordinal)].store(ctx, std::memory_order_release);
    return ctx;
  }
  std::lock_guard lock(state.context_mutex);
  if (CUcontext ctx = state.primary.load(std::memory_order_relaxed)) return ctx;
  const driver_api& api = runtime_driver("the CUDA device runtime");
  CUcontext ctx = nullptr;
  check_driver(api.cuDevicePrimaryCtxRetain(&ctx, state.handle), "cuDevicePrimaryCtxRetain");
  state.primary.store(ctx, std::memory_order_release);
  if (cacheable) known[static_cast<std::size_t>(ordinal)].store(ctx, std::memory_order_release);
  return ctx;
}

scoped_context::scoped_context(const driver_api& api, int ordinal) : api_(api) {
  CUcontext want = primary_context(ordinal);
  CUcontext current = nullptr;
  check_driver(api.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != want) {
    check_driver(api.cuCtxPushCurrent(want), "cuCtxPushCurrent");
    pushed_ = true;
  }
  ok_ = true;
}

scoped_context::scoped_context(const driver_api& api, int ordinal, std::nothrow_t) noexcept
    : api_(api) {
  if (!driver_alive()) return;
  try {
    CUcontext want = primary_context(ordinal);
    CUcontext current = nullptr;
    if (CUresult r = api.cuCtxGetCurrent(&current); r != CUDA_SUCCESS) {
      log_driver_failure(r, "cuCtxGetCurrent");
      return;
    }
    if (current != want) {
      if (CUresult r = api.cuCtxPushCurrent(want); r != CUDA_SUCCESS) {
        log_driver_failure(r, "cuCtxPushCurrent");
        return;
      }
      pushed_ = true;
    }
    ok_ = true;
  } catch (...) {
    ok_ = false;
  }
}

scoped_context::~scoped_context() {
  if (!pushed_ || !driver_alive()) return;
  CUcontext popped = nullptr;
  api_.cuCtxPopCurrent(&popped);
}

void log_driver_failure(CUresult result, const char* call) noexcept {
  if (result == CUDA_SUCCESS) return;
  try {
    const char* name = nullptr;
    if (const auto& table = driver_table(); table.api) table.api->cuGetErrorName(result, &name);
    log(log_level::warning, std::string("cucore: ") + call + " failed with " +
                                (name ? name : "CUDA_ERROR_UNKNOWN") +
                                " while releasing a resource");
  } catch (...) {
  }
}

void throw_empty(const char* what) {
  throw invalid_argument(std::string("this ") + what +
                         " is empty (default-constructed, moved from or closed)");
}

}  // namespace cucore::detail
