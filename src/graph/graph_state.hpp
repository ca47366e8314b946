// What cucore keeps per CUDA graph: the graph, its position in a hierarchy of child and branch
// graphs, and per node its serial (what graph_nodes name) and the user object that holds the node's
// owners (its attachment). Include only from cucore's sources.
//
// Ownership: a root graph_state owns its CUgraph and, through node_meta, the states of the child
// and branch graphs below it. Views of a child graph are aliasing shared_ptrs that share the
// root's control block, so any view keeps the whole hierarchy alive. All of it needs the same
// external synchronization as the CUDA graph.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cucore/graph/builder.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "loader/libraries.hpp"

namespace cucore::detail {

struct graph_state;
struct attachment;

// What cucore knows about one node beyond what the driver stores.
struct node_meta {
  // Names this entry for graph_nodes (0: not named yet); see graph_node::serial_.
  std::uint64_t serial = 0;
  CUuserObject attachment = nullptr;  // a reference to the node's owners, if any ...
  CUgraph holder = nullptr;           // ... held by this graph (see attachment_holder)
  std::optional<conditional_kind> conditional;
  graph_condition condition;
  // Child graph (one) or conditional bodies (in branch order); empty when not known (a
  // conditional node of a clone: CUDA has no call that returns a clone's bodies).
  std::vector<std::unique_ptr<graph_state>> bodies;
};

// The memory of a graph's metadata entries: blocks of up to kMaxBlock bytes from free lists per
// 16-byte size class, carved from 4 KiB chunks and kept until the graph goes (then handed to the
// next graphs); larger ones from the heap. After reserve(), the next small allocation cannot
// fail, so an entry can be inserted after the CUDA call that adds its node without a way to fail.
class entry_pool final : public std::pmr::memory_resource {
 public:
  entry_pool() = default;
  entry_pool(const entry_pool&) = delete;
  entry_pool& operator=(const entry_pool&) = delete;
  ~entry_pool() override;
  // Makes sure the next allocation of up to kMaxBlock bytes is served without the heap.
  void reserve() {
    if (static_cast<std::size_t>(chunk_end_ - chunk_next_) < kMaxBlock) new_chunk();
  }

  // The 4 KiB chunks taken from the heap so far (for tests).
  std::size_t chunk_count() const noexcept { return chunks_.size(); }

  static constexpr std::size_t kMaxBlock = 256;

 private:
  static constexpr std::size_t kAlign = 16;
  static constexpr std::size_t kChunk = 4096;
  struct free_block {
    free_block* next;
  };
  static std::size_t size_class(std::size_t bytes) noexcept {
    return bytes == 0 ? 1 : (bytes + kAlign - 1) / kAlign;
  }
  void* do_allocate(std::size_t bytes, std::size_t align) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override;
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override {
    return this == &o;
  }
  void new_chunk();

  std::array<free_block*, kMaxBlock / kAlign + 1> free_{};
  std::byte* chunk_next_ = nullptr;
  std::byte* chunk_end_ = nullptr;
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
};

// A node's handle and what cucore knows about it (read as `auto& [node, m] = entry`).
struct node_entry {
  CUgraphNode first;
  node_meta second;
};

// The metadata of a graph's nodes by handle: an open-addressing table (linear probing, a
// power-of-two number of slots, at most half full) of pointers to entries allocated from the
// graph's pool. Entries stay where they are while the table grows. An add reserves before the CUDA
// call that makes its node (room in the table, memory for the entry) and inserts after it, where
// nothing may fail. Cheaper per add than a node-based hash map: no bucket lists, no division.
class node_table {
 public:
  explicit node_table(entry_pool& pool) noexcept : pool_(&pool) {}
  node_table(const node_table&) = delete;
  node_table& operator=(const node_table&) = delete;
  ~node_table();

  template <class Entry>
  class basic_iterator {
   public:
    basic_iterator(node_entry* const* slot, node_entry* const* end) noexcept
        : slot_(slot), end_(end) {
      skip_empty();
    }
    Entry& operator*() const noexcept { return **slot_; }
    Entry* operator->() const noexcept { return *slot_; }
    basic_iterator& operator++() noexcept {
      ++slot_;
      skip_empty();
      return *this;
    }
    bool operator==(const basic_iterator& o) const noexcept { return slot_ == o.slot_; }

   private:
    void skip_empty() noexcept {
      while (slot_ != end_ && *slot_ == nullptr) ++slot_;
    }
    node_entry* const* slot_;
    node_entry* const* end_;
  };
  using iterator = basic_iterator<node_entry>;
  using const_iterator = basic_iterator<const node_entry>;
  iterator begin() noexcept { return {slots_.get(), slots_.get() + capacity_}; }
  iterator end() noexcept { return {slots_.get() + capacity_, slots_.get() + capacity_}; }
  const_iterator begin() const noexcept { return {slots_.get(), slots_.get() + capacity_}; }
  const_iterator end() const noexcept {
    return {slots_.get() + capacity_, slots_.get() + capacity_};
  }

  std::size_t size() const noexcept { return size_; }
  // The entry of `node`, or nullptr.
  node_entry* find(CUgraphNode node) noexcept { return slots_ ? *slot_of(node) : nullptr; }
  const node_entry* find(CUgraphNode node) const noexcept {
    return slots_ ? *slot_of(node) : nullptr;
  }
  bool contains(CUgraphNode node) const noexcept { return find(node) != nullptr; }
  // The entry of `node`, made (empty) if there is none. May throw (out of memory).
  node_meta& operator[](CUgraphNode node);
  // Makes sure the next emplace cannot fail: room in the table and memory for one entry.
  void reserve_one();
  // Adds `node`, which has no entry; reserve_one() must have been called since the last emplace.
  node_meta& emplace(CUgraphNode node, node_meta&& meta) noexcept;
  // Removes `e` (an entry of this table) and frees it.
  void erase(node_entry* e) noexcept;

 private:
  std::size_t home(CUgraphNode node) const noexcept {
    // Fibonacci hashing: handles are aligned heap addresses, so the low bits carry little.
    return static_cast<std::size_t>(
        (reinterpret_cast<std::uintptr_t>(node) * 0x9e3779b97f4a7c15ull) >> shift_);
  }
  // The slot holding `node`, or the empty slot where it would go.
  node_entry** slot_of(CUgraphNode node) const noexcept {
    const std::size_t mask = capacity_ - 1;
    for (std::size_t i = home(node);; i = (i + 1) & mask) {
      node_entry* e = slots_[i];
      if (e == nullptr || e->first == node) return &slots_[i];
    }
  }
  void grow(std::size_t capacity);

  entry_pool* pool_;
  std::unique_ptr<node_entry*[]> slots_;
  std::size_t capacity_ = 0;  // a power of two, or 0
  unsigned shift_ = 64;       // 64 - log2(capacity_)
  std::size_t size_ = 0;
};

struct graph_state {
  CUgraph graph = nullptr;
  int device = 0;
  bool owns = false;  // a root: destroyed with the state
  graph_state* parent = nullptr;
  CUgraphNode owner_node = nullptr;  // the node of `parent` this graph belongs to
  bool invalid = false;              // that node was destroyed
  std::uint64_t last_serial = 0;     // the last node_meta::serial handed out
  // Entries erased from `meta` so far (destroyed nodes). While none is, every graph_node made for
  // this graph names a node that still exists: no look-up needed to tell.
  std::uint64_t erased_entries = 0;
  // The table's entries come from a pool of the graph's own: an add takes its entry from a free
  // list rather than the heap, and a destroyed graph hands its blocks back at once. Declared
  // before the table, so it outlives it.
  entry_pool meta_pool;
  // Per node known to cucore (added through it, or named by a graph_node since).
  node_table meta{meta_pool};
  // Bodies of destroyed nodes, kept at stable addresses for the views that still point at them.
  std::vector<std::unique_ptr<graph_state>> graveyard;

  // Used on a top graph (the one holding its hierarchy's attachments): the attachments made last
  // for its nodes, each with the number of references this graph holds on it for nodes (counted
  // by commits, less the releases of destroyed nodes). A node whose owners are exactly those of
  // one of them takes one more reference on that user object instead of a new one: the owners
  // are the same, so they still live exactly as long as some graph can run either node, and the
  // driver makes one call per node instead of two. Graphs built in loops (the same kernel on
  // the same buffers) share nearly every attachment.
  struct recent_attachment {
    CUuserObject object = nullptr;
    const attachment* item = nullptr;  // the owners; alive while `references` > 0
    std::size_t references = 0;
  };
  static constexpr std::size_t kRecentAttachments = 4;
  std::array<recent_attachment, kRecentAttachments> recent_attachments{};
  std::size_t next_recent = 0;  // the slot a new attachment replaces when none is free

  graph_state() = default;
  graph_state(const graph_state&) = delete;
  graph_state& operator=(const graph_state&) = delete;
  ~graph_state();
};

// The state of a child or body graph of a node of `parent` (graph and node may be filled in
// after the CUDA call that makes them).
std::unique_ptr<graph_state> make_body(graph_state& parent, CUgraph g = nullptr,
                                       CUgraphNode owner_node = nullptr);

// A new root state owning `g` (destroys `g` if making the state fails).
std::shared_ptr<graph_state> adopt_root_graph(CUgraph g, int device);
// A view of `child` (a state inside the hierarchy `any_view` belongs to).
std::shared_ptr<graph_state> view_of(const std::shared_ptr<graph_state>& any_view,
                                     graph_state* child);
// A graph_node naming `node` of `state` (its metadata entry made, and given a serial, on first
// use).
graph_node node_of(const std::shared_ptr<graph_state>& state, CUgraphNode node);
// Whether `n` names a node that still exists: its graph is usable and its entry is the one `n`
// was made for.
bool names_live_node(const graph_node& n) noexcept;
// Throws for a destroyed child or branch graph.
void check_usable(const graph_state& s);
// The graph that holds the attachments of nodes added to `s`: the top of its hierarchy. CUDA
// refuses user-object references on conditional body graphs, and the top graph's references are
// the ones CUDA copies into clones, embeds and executable graphs, so every attachment of a
// hierarchy lives there.
CUgraph attachment_holder(const graph_state& s) noexcept;
// The state of that graph.
graph_state& attachment_holder_state(graph_state& s) noexcept;
// Records that `holder` released one reference on `object` (a destroyed node's), so a recent
// attachment of `top` whose graph holds none for nodes any more is never shared again.
void note_attachment_released(graph_state& top, CUgraph holder, CUuserObject object) noexcept;

// Copies the metadata of `source` into `clone` (cuGraphClone of it, or an embed of it), found
// through cuGraphNodeFindInClone; recurses into child graphs. CUDA already copied the user-object
// references that `source`'s graphs hold; this lets destroy() on the clone release the clone's
// own. When `source` is a view, the references its ancestors hold for its nodes are not copied by
// CUDA: `clone`'s graph retains new ones here.
void import_clone_metadata(const driver_api& api, graph_state& clone, const graph_state& source);

// A top-level copy of `s` (cuGraphClone) that holds a reference to every owner of its nodes, also
// when `s` is a view of a child or body graph whose owners its ancestors hold.
std::shared_ptr<graph_state> clone_whole(const driver_api& api, const graph_state& s);
// Throws for a destroyed view. nullptr for a top graph; for a view, clone_whole(s): clones,
// embeds, executable graphs and updates copy only the references of the graph they are given, so
// those made from a view are made from a whole copy of it.
std::shared_ptr<graph_state> whole_copy_of_view(const driver_api& api, const graph_state& s);

// The attachment references to release when `node` of `s` is destroyed: its own and those of every
// node in its child or body graphs that are held by a graph outside them (the top graph).
std::vector<std::pair<CUgraph, CUuserObject>> releases_for(const graph_state& s, CUgraphNode node);

// Marks `node`'s bodies (recursively) invalid, moves them to the graveyard and drops the node's
// entry (so graph_nodes naming it see it destroyed).
void invalidate_node(graph_state& s, CUgraphNode node) noexcept;

// ---- attachments -------------------------------------------------------------------------------

// An item handed from a CUDA user-object destructor to the release thread.
struct release_item {
  release_item* next = nullptr;
  release_item() = default;
  release_item(const release_item&) = delete;
  release_item& operator=(const release_item&) = delete;
  virtual ~release_item() = default;
};

// While one lives on a thread, the owners of the user objects that the driver destroys on this
// thread are dropped when it ends, on this thread, instead of on the release thread. The driver
// runs a user object's destructor inside the call that drops its last reference when no launch
// needs it any more: cuGraphDestroy, cuGraphExecDestroy of an executable graph with no launch in
// flight, cuGraphReleaseUserObject. So destroying a graph that never ran, or a node, releases its
// owners before it returns, like any C++ container, with their reference counts and memory staying
// in this thread's cache. Put one around such a call; it drops nothing until the call returned
// (a destructor must not call CUDA), and drops in the relaxed capture mode, so a free never
// invalidates a global-mode capture of this thread. Destructors run anywhere else (after a launch,
// on a driver thread) still go to the release thread.
class local_release_scope {
 public:
  explicit local_release_scope(const driver_api& api) noexcept;
  local_release_scope(const local_release_scope&) = delete;
  local_release_scope& operator=(const local_release_scope&) = delete;
  ~local_release_scope();

 private:
  friend void collect_release(local_release_scope& scope, release_item* item) noexcept;
  const driver_api* api_;
  local_release_scope* previous_;
  release_item* items_ = nullptr;
};

// Owners of a node, up to three inline (a kernel with two buffer arguments, a memcpy, a callback
// and its data), so making one allocates nothing in the common case. Null owners are skipped.
class owner_list {
 public:
  owner_list() noexcept = default;
  owner_list(std::initializer_list<std::shared_ptr<const void>> owners) {
    for (const auto& o : owners) push(o);
  }
  void push(std::shared_ptr<const void> o) {
    if (!o) return;
    if (count_ < inline_.size()) {
      inline_[count_] = std::move(o);
    } else {
      more_.push_back(std::move(o));
    }
    ++count_;
  }
  bool empty() const noexcept { return count_ == 0; }
  std::size_t size() const noexcept { return count_; }
  // Whether both lists hold the same owners in the same order (the same objects: shared_ptrs
  // that share ownership, whatever they point at).
  bool same_owners(const owner_list& o) const noexcept {
    if (count_ != o.count_) return false;
    for (std::size_t i = 0; i < count_; ++i) {
      if (!same_owner(at(i), o.at(i))) return false;
    }
    return true;
  }
  // Whether this list holds `first` then `rest`, in that order (none of them null), compared
  // without copying them.
  template <class First>
  bool same_owners(const First& first,
                   std::span<const std::shared_ptr<const void>> rest) const noexcept {
    if (count_ != 1 + rest.size() || !same_owner(at(0), first)) return false;
    for (std::size_t i = 0; i < rest.size(); ++i) {
      if (!same_owner(at(i + 1), rest[i])) return false;
    }
    return true;
  }

 private:
  template <class T>
  static bool same_owner(const std::shared_ptr<const void>& a,
                         const std::shared_ptr<T>& b) noexcept {
    return !a.owner_before(b) && !b.owner_before(a);
  }
  const std::shared_ptr<const void>& at(std::size_t i) const noexcept {
    return i < inline_.size() ? inline_[i] : more_[i - inline_.size()];
  }

  std::array<std::shared_ptr<const void>, 3> inline_;
  std::vector<std::shared_ptr<const void>> more_;
  std::size_t count_ = 0;
};

// The owners of one version of one node's parameters. Immutable once the user object exists.
struct attachment final : release_item {
  owner_list owners;
};

// A user object holding `owners`, already retained by a graph (MOVE), before the node exists.
// commit() hands the reference over to the node's metadata; without commit the destructor
// releases it (the owners are then dropped on the release thread).
class prepared_attachment {
 public:
  prepared_attachment() noexcept = default;
  // No owners prepares nothing. A new user object, retained by `g`.
  prepared_attachment(const driver_api& api, CUgraph g, owner_list owners);
  // For a node of the hierarchy whose top graph is `top`: a new reference on one of `top`'s
  // recent attachments when its owners are the same as `owners` (which are then dropped), else a
  // new user object, remembered as recent by commit().
  prepared_attachment(const driver_api& api, graph_state& top, owner_list owners);
  // One more reference on one of `top`'s recent attachments whose owners are `first` then
  // `rest` (compared without copying them), or nothing (shared() is false) when none has them.
  template <class First>
  static prepared_attachment share(const driver_api& api, graph_state& top, const First& first,
                                   std::span<const std::shared_ptr<const void>> rest) {
    prepared_attachment p(api, top);
    p.share_recent([&](const owner_list& o) { return o.same_owners(first, rest); });
    return p;
  }
  bool shared() const noexcept { return shared_slot_ < graph_state::kRecentAttachments; }
  // A new user object for `owners` (retained by `top`'s graph, remembered as recent by commit()),
  // without looking for a recent one to share: for a caller that already looked (share()).
  static prepared_attachment unshared(const driver_api& api, graph_state& top, owner_list owners) {
    prepared_attachment p(api, top);
    if (!owners.empty()) p.create(std::move(owners));
    return p;
  }
  prepared_attachment(prepared_attachment&& o) noexcept
      : api_(o.api_),
        graph_(o.graph_),
        object_(std::exchange(o.object_, nullptr)),
        top_(o.top_),
        item_(o.item_),
        shared_slot_(o.shared_slot_) {}
  prepared_attachment& operator=(prepared_attachment&&) = delete;
  prepared_attachment(const prepared_attachment&) = delete;
  ~prepared_attachment();
  // Records the reference (and the graph holding it) on a node's metadata.
  void commit(node_meta& meta) noexcept;
  // Leaves the reference with the graph, attached to no node (released with the graph).
  void commit_anonymous() noexcept { object_ = nullptr; }

 private:
  prepared_attachment(const driver_api& api, graph_state& top) noexcept
      : api_(&api), graph_(top.graph), top_(&top) {}
  void create(owner_list owners);
  // Takes one more reference on the first recent attachment of top_ (one its graph still holds
  // for nodes) whose owners satisfy `same`; whether there was one.
  template <class Same>
  bool share_recent(Same&& same) {
    for (std::size_t i = 0; i < top_->recent_attachments.size(); ++i) {
      const auto& recent = top_->recent_attachments[i];
      if (recent.references != 0 && same(recent.item->owners)) {
        share_slot(i);
        return true;
      }
    }
    return false;
  }
  // Takes one more reference on top_'s recent attachment in `slot`.
  void share_slot(std::size_t slot);

  const driver_api* api_ = nullptr;
  CUgraph graph_ = nullptr;
  CUuserObject object_ = nullptr;
  graph_state* top_ = nullptr;        // set when the attachment may be shared
  const attachment* item_ = nullptr;  // the new user object's owners
  std::size_t shared_slot_ = graph_state::kRecentAttachments;  // a recent one's slot, if shared
};

// ---- shared helpers ----------------------------------------------------------------------------

const driver_api& graph_driver();
graph_node_kind kind_of(CUgraphNodeType t) noexcept;
unsigned dot_flags(const graph_dot_options& o) noexcept;
// When a failed instantiate (or clone) of `s` returned `r` because of the driver's rules for
// graphs with conditional nodes (one executable graph at a time; no clone at all): the rule and
// what to do; else empty.
std::string_view conditional_graph_rule(const driver_api& api, const graph_state& s, CUresult r,
                                        bool cloning);

cucore::graph instantiate_graph(const driver_api& api, const graph_state& s,
                                const graph_instantiate_options& options);
void dot_print(const driver_api& api, const graph_state& s, const std::filesystem::path& path,
               const graph_dot_options& options);
graph_condition create_condition(const driver_api& api, const graph_state& s,
                                 std::optional<unsigned> default_value);
// The conditional node parameters for `kind`. After the add, the driver has pointed
// conditional.phGraph_out at its own array of the bodies (read them from there).
CUgraphNodeParams conditional_params(const graph_state& s, const graph_condition& c,
                                     conditional_kind kind, unsigned count, CUgraph* bodies_out);

// A copy of a host callback's user data, aligned for any type (callbacks cast it to a struct).
std::shared_ptr<void> copy_user_data(std::span<const std::byte> data);

// Friend of the public classes: builds them from states.
struct graph_access {
  static graph_definition definition(std::shared_ptr<graph_state> s) {
    return graph_definition(std::move(s));
  }
  static graph_node node(std::shared_ptr<graph_state> s, CUgraphNode n, std::uint64_t serial) {
    return graph_node(std::move(s), n, serial);
  }
  static const std::shared_ptr<graph_state>& graph_of(const graph_node& n) { return n.graph_; }
  static CUgraphNode handle_of(const graph_node& n) { return n.node_; }
  static std::uint64_t serial_of(const graph_node& n) { return n.serial_; }
  static const std::shared_ptr<graph_state>& state(const graph_definition& d) { return d.state_; }
  static graph_condition condition(unsigned long long h, CUgraph g) {
    return graph_condition(h, g);
  }
  static cucore::graph executable(CUgraphExec exec, int device);
  // What keeps `g`'s executable graph alive (nullptr for an empty graph).
  static std::shared_ptr<const void> executable_owner(const cucore::graph& g);
  static const std::shared_ptr<graph_state>& builder_state(const graph_builder& b);
};

}  // namespace cucore::detail
