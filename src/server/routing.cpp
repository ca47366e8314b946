// The compile server's routing: each compile to a worker of its client's pool, preferring one
// that holds its prefix's automatic-PCH image, and which worker makes an image when.
#include <poll.h>

#include <algorithm>
#include <fstream>

#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "server/daemon.hpp"

namespace cucore::server {
namespace {

using namespace std::chrono_literals;

// The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 'Z', ...), '?' if unreadable.
char process_state(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');  // the name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

// What tells worker pools apart: the NVRTC file and the compilers' variables.
std::string pool_identity(const std::string& library, const compiler_variables& environment) {
  std::string id = library;
  for (const auto& [name, value] : environment) {
    ((id += '\0') += name) += value ? "=" + *value : std::string("\x01");
  }
  return id;
}

}  // namespace

// The library's pool, made at its first request; empty when the server serves kMaxLibraries
// others already. Called with routes_mutex_ held.
std::vector<worker_slot*> compile_server::pool_of(const std::string& library,
                                                  const compiler_variables& environment) {
  const std::string id = pool_identity(library, environment);
  std::vector<worker_slot*> pool;
  std::size_t pools = 0;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    if (i == 0 || workers_[i]->pool != workers_[i - 1]->pool) ++pools;
    if (workers_[i]->pool == id) pool.push_back(workers_[i].get());
  }
  if (pool.empty() && pools < kMaxPools) {
    for (std::size_t i = 0; i < settings_.workers; ++i) {
      auto w = std::make_unique<worker_slot>();
      w->library = library;
      w->environment = environment;
      w->pool = id;
      pool.push_back(w.get());
      workers_.push_back(std::move(w));
    }
  }
  return pool;
}

frame compile_server::run_on_worker(worker_slot& w, frame_type type, std::string_view payload,
                                    int conn, bool& client_gone) {
  if (w.pid < 0) spawn(w);
  write_frame(w.fd.get(), type, payload, 30s);
  for (;;) {
    pollfd p{w.fd.get(), POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(kHeartbeat.count()));
    if (r < 0 && errno != EINTR) throw error(errno_text("poll"));
    if (r > 0) {
      std::optional<frame> answer = read_frame(w.fd.get(), 30s);
      if (!answer) throw wire_error("the worker exited");
      return std::move(*answer);
    }
    // A stopped worker (SIGSTOP, a debugger) is a hung one: heartbeats would hide it.
    if (process_state(w.pid) == 'T') throw error("the worker is stopped");
    if (!client_gone && conn >= 0) {
      try {
        write_frame(conn, frame_type::heartbeat, {}, 1s);
      } catch (const std::exception&) {
        client_gone = true;  // the compile finishes anyway: the worker is in the middle of it
      }
    }
  }
}

void compile_server::compile(int conn, const frame& request) {
  const bool raw = request.type == frame_type::raw_compile_request;
  compile_request decoded;
  try {
    decoded = decode_request(request.payload);
  } catch (const wire_error& e) {
    write_frame(conn, frame_type::refusal, std::string("malformed request: ") + e.what(), 5s);
    return;
  }
  const std::string prefix = prefix_identity(decoded);
  const std::string route =
      prefix.empty()
          ? prefix
          : pool_identity(decoded.view.nvrtc_path, decoded.view.environment) + '\0' + prefix;
  worker_slot* chosen = nullptr;
  bool new_prefix = false;
  {
    const std::lock_guard lock(routes_mutex_);
    const std::vector<worker_slot*> pool =
        pool_of(decoded.view.nvrtc_path, decoded.view.environment);
    if (pool.empty()) {
      write_frame(conn, frame_type::refusal,
                  "the server's workers serve " + std::to_string(kMaxPools) +
                      " other NVRTC libraries or compiler environments already",
                  5s);
      return;
    }
    // The least loaded; a worker making an image counts as two requests more (it takes ~4x a
    // plain compile).
    const auto weight = [](const worker_slot* w) { return w->load + (w->making_image ? 2 : 0); };
    chosen = pool.front();
    for (worker_slot* w : pool) {
      if (weight(w) < weight(chosen)) chosen = w;
    }
    // The least loaded worker holding the prefix's image, unless more than two requests wait there
    // beyond the least loaded one: a compile from an image takes ~0.2x, so a short queue there is
    // quicker than a compile from the headers elsewhere, a long one is not. A compile of the
    // prefix on a worker without its image is plain, and that worker may make one afterwards
    // (make_image_after): a popular prefix's image spreads to the workers it keeps busy.
    const auto it = route.empty() ? routes_.end() : routes_.find(route);
    worker_slot* holder = nullptr;
    if (it != routes_.end()) {
      for (const route_entry& e : it->second) {
        if (e.ready && (holder == nullptr || weight(e.worker) < weight(holder))) holder = e.worker;
      }
    }
    if (holder != nullptr && weight(holder) <= weight(chosen) + 2) chosen = holder;
    new_prefix =
        !route.empty() && (it == routes_.end() ||
                           std::none_of(it->second.begin(), it->second.end(),
                                        [&](const route_entry& e) { return e.worker == chosen; }));
    ++chosen->load;
  }
  worker_slot& w = *chosen;
  ++requests_;
  ++queued_;
  std::unique_lock use(w.use, std::defer_lock);
  // A queued request's client hears from the server as a running one's does.
  bool client_gone = false;
  while (!use.try_lock_for(kHeartbeat)) {
    if (client_gone) continue;
    try {
      write_frame(conn, frame_type::heartbeat, {}, 1s);
    } catch (const std::exception&) {
      client_gone = true;
    }
  }
  --queued_;
  ++active_;
  w.busy = true;
  struct done_guard {
    compile_server& s;
    worker_slot& w;
    ~done_guard() {
      w.busy = false;
      --w.load;
      --s.active_;
      s.touch();
    }
  } done{*this, w};
  if (client_gone) return;  // nobody waits for it any more: not compiled

  std::string refusal;
  std::optional<frame> answer;
  try {
    answer = run_on_worker(w, raw ? frame_type::raw_compile_request : frame_type::compile_request,
                           request.payload, conn, client_gone);
  } catch (const std::exception& e) {
    refusal = std::string("the worker failed: ") + e.what();
    retire(w, true);
  }
  if (w.pid > 0) ++w.requests;
  const frame_type reply_type = raw ? frame_type::raw_compile_reply : frame_type::compile_reply;
  // Only a prefix the worker could make an image of (its plain compile succeeded and says
  // first_seen: a prefix, keyed, no image yet; not a caller's auto_pch=false, a prefix without
  // headers, one whose compile logs diagnostics). Claimed before the reply is sent, so that the
  // client's next status shows it being made.
  const bool make_image =
      new_prefix && answer && answer->type == reply_type && w.pid > 0 &&
      reply_succeeded(answer->type, answer->payload) &&
      auto_pch_of_reply(answer->type, answer->payload) == auto_pch_status::first_seen &&
      claim_image(w, route);
  try {
    if (client_gone) {
    } else if (!refusal.empty()) {
      write_frame(conn, frame_type::refusal, refusal, 5s);
    } else if (answer->type == reply_type || answer->type == frame_type::refusal) {
      write_frame(conn, answer->type, answer->payload, 30s);
    } else {
      write_frame(conn, frame_type::refusal, "the worker answered out of turn", 5s);
    }
  } catch (const std::exception& e) {
    cucore::log(log_level::debug, std::string("compile server: reply lost: ") + e.what());
  }
  // Read after the reply (it costs a /proc read or two, nothing the client waits for). A worker
  // past its memory bound is replaced now, its lock still held: no request reaches the old
  // process meanwhile, and it makes no image.
  if (w.pid > 0) {
    w.resident = proc_status_bytes(w.pid, "VmRSS");
    w.peak = std::max<std::uint64_t>(w.peak, proc_status_bytes(w.pid, "VmHWM"));
  }
  if (w.pid > 0 && w.resident > settings_.worker_memory_limit) {
    cucore::log(log_level::info, "compile server: worker " + std::to_string(w.pid) + " holds " +
                                     std::to_string(w.resident >> 20) +
                                     " MiB, over its bound: replaced");
    if (make_image) {
      w.making_image = false;
      const std::lock_guard lock(routes_mutex_);
      if (const auto it = routes_.find(route); it != routes_.end()) {
        std::erase_if(it->second, [&](const route_entry& e) { return e.worker == &w; });
        if (it->second.empty()) routes_.erase(it);
      }
    }
    retire(w, false);
  } else if (make_image) {
    make_image_after(
        w, route,
        raw ? frame_type::raw_compile_request_make_image : frame_type::compile_request_make_image,
        request.payload);
  }
}

// Whether `w` is to make the prefix's image now: no request waits for a worker, `w` has none, and
// no worker is making one (16 workers making one image at once took 8x a plain compile each).
// Then `w`'s entry is added (not ready) and the worker marked as making it.
bool compile_server::claim_image(worker_slot& w, const std::string& route) {
  if (stop_ || queued_ > 0) return false;
  const std::lock_guard lock(routes_mutex_);
  auto& entries = routes_[route];
  for (const route_entry& e : entries) {
    if (e.worker == &w || !e.ready) return false;
  }
  entries.push_back(route_entry{&w, false});
  w.making_image = true;
  return true;
}

// A prefix's image is made by the worker that compiled its first request, after that compile was
// answered, and only when no request waits for a worker (claim_image): a burst of misses of one
// prefix compiles plain on every worker at once (the image would take ~4x a plain compile on its
// critical path), and the image is there for the misses after it. A prefix whose image is not
// made then (requests were waiting) is tried again at its next miss. Called with the worker's lock
// held, after claim_image.
void compile_server::make_image_after(worker_slot& w, const std::string& route, frame_type type,
                                      const std::string& payload) {
  bool made = false;
  try {
    bool nobody = true;
    const frame answer = run_on_worker(w, type, payload, -1, nobody);
    // Made: the worker says created, and the compile succeeded (a failed one leaves no image).
    made = auto_pch_of_reply(answer.type, answer.payload) == auto_pch_status::created &&
           reply_succeeded(answer.type, answer.payload);
  } catch (const std::exception& e) {
    cucore::log(log_level::debug,
                std::string("compile server: making a prefix's image failed: ") + e.what());
    retire(w, true);
  }
  w.making_image = false;
  if (w.pid > 0) {
    w.resident = proc_status_bytes(w.pid, "VmRSS");
    w.peak = std::max<std::uint64_t>(w.peak, proc_status_bytes(w.pid, "VmHWM"));
  }
  // Made: later misses of the prefix may go here. Not made: the prefix's next miss tries again.
  const std::lock_guard lock(routes_mutex_);
  if (const auto it = routes_.find(route); it != routes_.end()) {
    for (route_entry& e : it->second) {
      if (e.worker == &w) e.ready = made;
    }
    std::erase_if(it->second, [&](const route_entry& e) { return e.worker == &w && !e.ready; });
    if (it->second.empty()) routes_.erase(it);
  }
}

}  // namespace cucore::server
