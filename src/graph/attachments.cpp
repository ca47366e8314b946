// Node attachments: the user objects that hold a node's owners, and the release thread that drops
// them. A CUDA user-object destructor runs on a driver thread and must not call CUDA (releasing a
// buffer calls cuMemFreeAsync) nor block, so it only pushes the attachment onto a lock-free stack
// and wakes the release thread, which deletes it on a thread of our own.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "graph/graph_state.hpp"
#include "runtime/runtime.hpp"

namespace cucore::detail {
namespace {

// Attachments are made on the threads that build graphs and dropped on the release thread. Their
// storage goes back to the builders through a lock-free list instead of the allocator, which would
// move every block between the two threads' caches (and take the arena lock) once per node. The
// release thread pushes one at a time; a builder takes the whole list at once (exchange), so the
// list has no ABA problem. At most kMaxSpare are kept; the rest are deleted.
class attachment_recycler {
 public:
  // An attachment without owners, recycled when one is spare.
  std::unique_ptr<attachment> take() {
    thread_local spare_list local;
    if (local.head == nullptr) {
      local.head = spare_.exchange(nullptr, std::memory_order_acquire);
      local.owner = this;
    }
    if (local.head == nullptr) return std::make_unique<attachment>();
    attachment* a = local.head;
    local.head = static_cast<attachment*>(a->next);
    a->next = nullptr;
    count_.fetch_sub(1, std::memory_order_relaxed);
    return std::unique_ptr<attachment>(a);
  }

  // Drops `a`'s owners and keeps its storage for a later take() (or deletes it).
  void give(attachment* a) noexcept {
    a->owners = owner_list();
    if (count_.load(std::memory_order_relaxed) >= kMaxSpare) {
      delete a;
      return;
    }
    count_.fetch_add(1, std::memory_order_relaxed);
    attachment* head = spare_.load(std::memory_order_relaxed);
    do {
      a->next = head;
    } while (!spare_.compare_exchange_weak(head, a, std::memory_order_release,
                                           std::memory_order_relaxed));
  }

 private:
  // A builder thread's share of the list; returned (deleted) when the thread ends.
  struct spare_list {
    attachment* head = nullptr;
    attachment_recycler* owner = nullptr;
    ~spare_list() {
      while (head != nullptr) {
        attachment* next = static_cast<attachment*>(head->next);
        delete head;
        if (owner != nullptr) owner->count_.fetch_sub(1, std::memory_order_relaxed);
        head = next;
      }
    }
  };
  static constexpr std::int64_t kMaxSpare = 1 << 16;
  std::atomic<attachment*> spare_{nullptr};
  std::atomic<std::int64_t> count_{0};
};

// Never destroyed: builders and the release thread may use it during exit.
attachment_recycler& recycler() {
  static attachment_recycler* r = new attachment_recycler;
  return *r;
}

class release_queue {
 public:
  // Starts the thread on first use; throws std::system_error when it cannot.
  void ensure_started(const driver_api& api) {
    std::call_once(started_, [this, &api] {
      std::thread([this, api = &api] {
        // Dropping owners makes CUDA calls (cuMemFreeAsync, cuLibraryUnload) at any time; in the
        // relaxed mode they never invalidate a global-mode capture running on another thread.
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        api->cuThreadExchangeStreamCaptureMode(&mode);
        run();
      }).detach();
    });
  }

  // Lock-free. The release thread is woken (a futex wake, never a lock) only when it sleeps, so a
  // graph destroyed with thousands of attachments costs one wake-up, not one per attachment.
  void push(release_item* item) noexcept {
    release_item* head = head_.load(std::memory_order_relaxed);
    do {
      item->next = head;
    } while (!head_.compare_exchange_weak(head, item, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
    if (sleeping_.load(std::memory_order_seq_cst)) {
      signal_.fetch_add(1, std::memory_order_seq_cst);
      signal_.notify_one();
    }
  }

 private:
  [[noreturn]] void run() noexcept {
    int idle = 0;
    for (;;) {
      release_item* list = head_.exchange(nullptr, std::memory_order_acquire);
      if (list == nullptr && idle < kIdlePolls) {
        // Stay awake a while after work: a graph being destroyed hands over its attachments one
        // by one from the driver's thread, and each push that found this thread asleep would pay
        // a futex wake (a system call) on that thread.
        ++idle;
        std::this_thread::sleep_for(kIdlePoll);
        continue;
      }
      if (list == nullptr) {
        // Announce the sleep, then look once more: a push either sees the announcement (and
        // changes signal_, so the wait returns) or happened before the look (and is found).
        const std::uint32_t seen = signal_.load(std::memory_order_seq_cst);
        sleeping_.store(true, std::memory_order_seq_cst);
        if (head_.load(std::memory_order_seq_cst) == nullptr) {
          signal_.wait(seen, std::memory_order_seq_cst);
        }
        sleeping_.store(false, std::memory_order_seq_cst);
        continue;
      }
      idle = 0;
      // Once the process is exiting the owners may need a driver that is gone: leak them. While
      // the batch is released, the exit waits for it.
      const background_release release;
      while (list != nullptr) {
        release_item* next = list->next;
        // Attachments are the only release items: their owners go, their storage is reused.
        if (release.ok()) recycler().give(static_cast<attachment*>(list));
        list = next;
      }
    }
  }

  // 100 polls 200 µs apart: awake for ~20 ms after the last work, then asleep until woken.
  static constexpr int kIdlePolls = 100;
  static constexpr std::chrono::microseconds kIdlePoll{200};

  std::once_flag started_;
  std::atomic<release_item*> head_{nullptr};
  std::atomic<std::uint32_t> signal_{0};
  std::atomic<bool> sleeping_{false};
};

// Never destroyed: the release thread and late CUDA callbacks may use it during exit.
release_queue& queue() {
  static release_queue* q = new release_queue;
  return *q;
}

// The scope collecting this thread's releases, if any (see local_release_scope).
thread_local local_release_scope* current_release_scope = nullptr;

// The user object's destructor (CUhostFn): only hands the attachment over, to the scope of the
// thread the driver runs it on if there is one, else to the release thread.
void CUDA_CB enqueue_release(void* item) {
  auto* i = static_cast<release_item*>(item);
  if (local_release_scope* scope = current_release_scope) {
    collect_release(*scope, i);
    return;
  }
  queue().push(i);
}

}  // namespace

void collect_release(local_release_scope& scope, release_item* item) noexcept {
  item->next = scope.items_;
  scope.items_ = item;
}

local_release_scope::local_release_scope(const driver_api& api) noexcept
    : api_(&api), previous_(current_release_scope) {
  current_release_scope = this;
}

local_release_scope::~local_release_scope() {
  // Restored first: an owner dropped below may destroy another graph, under a scope of its own.
  current_release_scope = previous_;
  if (items_ == nullptr) return;
  const background_release release;  // the exit waits for this batch
  if (!release.ok()) return;         // exiting: leak them, as the release thread does
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  const bool relaxed = api_->cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
  for (release_item* i = std::exchange(items_, nullptr); i != nullptr;) {
    release_item* next = i->next;
    recycler().give(static_cast<attachment*>(i));  // attachments are the only release items
    i = next;
  }
  if (relaxed) api_->cuThreadExchangeStreamCaptureMode(&mode);
}

prepared_attachment::prepared_attachment(const driver_api& api, CUgraph g, owner_list owners)
    : api_(&api), graph_(g) {
  if (owners.empty()) return;
  create(std::move(owners));
}

prepared_attachment::prepared_attachment(const driver_api& api, graph_state& top, owner_list owners)
    : prepared_attachment(api, top) {
  if (owners.empty()) return;
  // Shared: `owners` go here, the shared attachment holds the same ones.
  if (share_recent([&](const owner_list& o) { return o.same_owners(owners); })) return;
  create(std::move(owners));
}

void prepared_attachment::share_slot(std::size_t slot) {
  // The graph holds a reference on it, so it is alive: take one more for the new node.
  const CUuserObject object = top_->recent_attachments[slot].object;
  check_driver(api_->cuGraphRetainUserObject(graph_, object, 1, 0), "cuGraphRetainUserObject");
  object_ = object;
  shared_slot_ = slot;
}

void prepared_attachment::create(owner_list owners) {
  queue().ensure_started(*api_);
  std::unique_ptr<attachment> item = recycler().take();
  item->owners = std::move(owners);
  CUuserObject object = nullptr;
  check_driver(api_->cuUserObjectCreate(&object, item.get(), &enqueue_release, 1,
                                        CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
               "cuUserObjectCreate");
  // The user object now owns the item: its destructor enqueues it.
  item_ = item.release();
  const CUresult retained =
      api_->cuGraphRetainUserObject(graph_, object, 1, CU_GRAPH_USER_OBJECT_MOVE);
  if (retained != CUDA_SUCCESS) {
    // The only reference: the item goes to the release thread.
    api_->cuUserObjectRelease(object, 1);
    check_driver(retained, "cuGraphRetainUserObject");
  }
  object_ = object;
}

prepared_attachment::~prepared_attachment() {
  if (object_ == nullptr) return;
  if (!driver_alive()) return;  // leak rather than call a driver that is gone
  const local_release_scope release(*api_);
  log_driver_failure(api_->cuGraphReleaseUserObject(graph_, object_, 1),
                     "cuGraphReleaseUserObject");
}

void prepared_attachment::commit(node_meta& meta) noexcept {
  if (object_ == nullptr) return;
  if (top_ != nullptr) {
    auto& recent = top_->recent_attachments;
    if (shared_slot_ < recent.size()) {
      ++recent[shared_slot_].references;
    } else {
      // Remember the new one: in a slot no node references any more, else the oldest.
      std::size_t slot = recent.size();
      for (std::size_t i = 0; i < recent.size() && slot == recent.size(); ++i) {
        if (recent[i].references == 0) slot = i;
      }
      if (slot == recent.size()) {
        slot = top_->next_recent;
        top_->next_recent = (top_->next_recent + 1) % recent.size();
      }
      recent[slot] = {object_, item_, 1};
    }
  }
  meta.attachment = std::exchange(object_, nullptr);
  meta.holder = graph_;
}

void note_attachment_released(graph_state& top, CUgraph holder, CUuserObject object) noexcept {
  if (holder != top.graph) return;
  for (auto& recent : top.recent_attachments) {
    if (recent.object == object && recent.references > 0) {
      --recent.references;
      return;
    }
  }
}

}  // namespace cucore::detail
