// The drop-ins' handle → state map (docs/transparent-cache.md): each library's program (NVRTC,
// libNVVM) or link (nvJitLink) handle is the real library's own, and what the drop-in keeps about
// it (its inputs, the last compile's hit) stands beside it here. Every member is noexcept: a state
// the table cannot hold is a program that is simply never cached.
#pragma once

#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace cucore::dropin {

// One table per Handle and State (the library's per-handle state, whose `hit` is set when the last
// compile was answered from the cache), made on first use and leaked: programs may be destroyed
// during exit.
template <class Handle, class State>
class program_table {
 public:
  static std::shared_ptr<State> state_of(Handle handle) noexcept {
    if (handle == nullptr) return nullptr;
    return with_states([&](map& states) -> std::shared_ptr<State> {
      auto it = states.find(handle);
      return it == states.end() ? nullptr : it->second;
    });
  }

  // The handle's state when its last compile was a hit.
  static std::shared_ptr<const State> hit_of(Handle handle) noexcept {
    auto state = state_of(handle);
    return state && state->hit ? state : nullptr;
  }

  static void remember(Handle handle, std::shared_ptr<State> state) noexcept {
    // Without its state the program is simply never cached.
    with_states([&](map& states) { states[handle] = std::move(state); });
  }

  static std::shared_ptr<State> forget(Handle handle) noexcept {
    if (handle == nullptr) return nullptr;
    return with_states([&](map& states) -> std::shared_ptr<State> {
      auto it = states.find(handle);
      if (it == states.end()) return nullptr;
      auto state = std::move(it->second);
      states.erase(it);
      return state;
    });
  }

  // The real library's create of `*handle`, `real_create(handle)`, with the handle's `state` (made
  // before the real call sees the program's inputs; nullptr: none): remembered once the handle is
  // made.
  template <class Result, class Create>
  static Result create(Handle* handle, Create real_create, Result success,
                       std::shared_ptr<State> state) noexcept {
    const Result result = real_create(handle);
    if (result == success && state && handle != nullptr && *handle != nullptr) {
      remember(*handle, std::move(state));
    }
    return result;
  }

  // The real library's destroy of `*handle`, `real_destroy(handle)`: the state is forgotten before
  // the real call frees the handle (another thread may be handed the same address at once), and
  // remembered again if the real call refuses it (anything but `success`).
  template <class Result, class Destroy>
  static Result destroy(Handle* handle, Destroy real_destroy, Result success) noexcept {
    const Handle h = handle != nullptr ? *handle : nullptr;
    auto state = forget(h);
    const Result result = real_destroy(handle);
    if (result != success && state) remember(h, std::move(state));
    return result;
  }

 private:
  using map = std::unordered_map<Handle, std::shared_ptr<State>>;
  struct storage {
    std::mutex mutex;
    map states;
  };

  // One per Handle and State (not per caller of with_states).
  static storage& table() {
    static auto* t = new storage;
    return *t;
  }

  // use(states) under the table's lock; what `use` returns, or its default when the table cannot
  // be made or `use` runs out of memory.
  template <class Use>
  static auto with_states(Use use) noexcept {
    using result = decltype(use(std::declval<map&>()));
    try {
      auto& t = table();
      std::lock_guard lock(t.mutex);
      return use(t.states);
    } catch (...) {
      if constexpr (!std::is_void_v<result>) return result{};
    }
  }
};

}  // namespace cucore::dropin
