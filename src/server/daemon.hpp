// The listening process (docs/compile-server.md, "Server"): its worker slots and the class that
// serves clients. daemon.cpp runs it; routing.cpp sends each compile to a worker.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cucore/server.hpp"
#include "server/internal.hpp"

namespace cucore::server {

using clock = std::chrono::steady_clock;

// A /proc/PID/status field in kB, as bytes (0 if unreadable).
std::uint64_t proc_status_bytes(int pid, std::string_view field);

struct worker_slot {
  // Held for one request at a time: the queue is the threads waiting here. (Not a
  // std::timed_mutex: ThreadSanitizer does not see pthread_mutex_clocklock, its timed lock.)
  class slot_lock {
   public:
    // Takes it, or returns false after `wait`.
    bool try_lock_for(std::chrono::milliseconds wait) {
      std::unique_lock lock(mutex_);
      if (!cv_.wait_for(lock, wait, [&] { return !held_; })) return false;
      held_ = true;
      return true;
    }
    void lock() {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return !held_; });
      held_ = true;
    }
    void unlock() {
      {
        const std::lock_guard lock(mutex_);
        held_ = false;
      }
      cv_.notify_one();
    }

   private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool held_ = false;
  } use;
  std::string library;  // the NVRTC file this slot's process loads (--nvrtc)
  // The variables of the compilers' table its process starts with: NVRTC and libNVVM read some of
  // them once per process (LLVM_OVERRIDE_PRODUCER, measured), so a worker serves only clients
  // with the same values; set per request they would be too late.
  compiler_variables environment;
  std::string pool;  // library and environment: which clients it serves
  std::atomic<int> pid{-1};
  unique_fd fd;
  std::atomic<int> load{0};  // requests routed here, waiting or running
  std::atomic<bool> busy{false};
  std::atomic<bool> making_image{false};  // a prefix's image, after the compile that asked
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> resident{0}, peak{0};
  std::atomic<std::size_t> restarts{0};
};

class compile_server {
 public:
  explicit compile_server(compile_server_settings settings);

  // Returns 3 when another server holds the lock.
  int run(int ready_fd);

 private:
  void touch() { last_activity_ = clock::now().time_since_epoch().count(); }
  bool acquire_lock();
  void spawn(worker_slot& w);
  void retire(worker_slot& w, bool kill);
  void serve(unique_fd conn);
  void compile(int conn, const frame& request);
  // Sends `type` with `payload` to `w` (its lock held) and waits for the answer; heartbeats go to
  // `conn` meanwhile (-1: nobody waits). Throws when the worker dies, stops or answers nothing.
  frame run_on_worker(worker_slot& w, frame_type type, std::string_view payload, int conn,
                      bool& client_gone);
  bool claim_image(worker_slot& w, const std::string& route);
  void make_image_after(worker_slot& w, const std::string& route, frame_type type,
                        const std::string& payload);
  std::vector<worker_slot*> pool_of(const std::string& library,
                                    const compiler_variables& environment);
  std::vector<worker_slot*> all_workers();
  std::string status_json();
  void shutdown_workers();

  compile_server_settings settings_;
  unique_fd lock_fd_, listen_fd_;
  std::mutex routes_mutex_;  // guards workers_' list (not the slots) and routes_
  // Each NVRTC library the clients load, with each set of values of the compilers' variables, gets
  // its own pool of settings_.workers slots (a worker compiles with the very file its client
  // loaded, started with its client's variables), at most kMaxPools of them; a slot's process
  // starts at its first request (the pool of the server's own library and variables at start).
  static constexpr std::size_t kMaxPools = 4;
  std::vector<std::unique_ptr<worker_slot>> workers_;
  // Pool and prefix identity → the workers that hold its image, or are making it (not ready).
  struct route_entry {
    worker_slot* worker = nullptr;
    bool ready = false;
  };
  std::unordered_map<std::string, std::vector<route_entry>> routes_;
  std::atomic<std::size_t> queued_{0}, active_{0};
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<clock::rep> last_activity_{0};
  std::atomic<bool> stop_{false};
  std::string own_namespace_;
  clock::time_point started_ = clock::now();
};

}  // namespace cucore::server
