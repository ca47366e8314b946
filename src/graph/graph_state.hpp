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
#include <initializer_list>
#include <memory>
#include <memory_resource>
#include <optional>
#include <string_view>
#include <unordered_map>
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

// The memory of a graph's metadata maps: blocks of up to kMaxBlock bytes (entries, small bucket
// arrays) from free lists per 16-byte size class, carved from 4 KiB chunks and kept until the
// graph goes; larger ones from the heap. After reserve(), the next small allocation cannot fail,
// so an entry can be inserted after the CUDA call that adds its node without a way to fail.
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
  // The maps' entries and buckets come from a pool of the graph's own: an add takes its entry
  // from a free list rather than the heap, and a destroyed graph hands its blocks back at once.
  // Declared before the maps, so it outlives them.
  entry_pool meta_pool;
  using meta_map = std::pmr::unordered_map<CUgraphNode, node_meta>;
  // Per node known to cucore (added through it, or named by a graph_node since).
  meta_map meta{&meta_pool};
  // Bodies of destroyed nodes, kept at stable addresses for the views that still point at them.
  std::vector<std::unique_ptr<graph_state>> graveyard;
  // Always empty: a node's entry is made here and extracted before the CUDA call that adds the
  // node (keeping the bucket array, so an add allocates only its entry).
  meta_map meta_staging{&meta_pool};

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
      const auto& a = at(i);
      const auto& b = o.at(i);
      if (a.owner_before(b) || b.owner_before(a)) return false;
    }
    return true;
  }

 private:
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
  void create(owner_list owners);

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

// Makes room for one more entry, so the next insert cannot rehash (and so cannot throw).
// Grows geometrically: reserve(size() + 1) on every add would shrink and regrow the buckets.
template <class Map>
void make_room_for_one(Map& m) {
  if (static_cast<float>(m.size() + 1) >
      m.max_load_factor() * static_cast<float>(m.bucket_count())) {
    m.reserve(2 * (m.size() + 1));
  }
}

// A map entry for a node about to be added to `s`, with room made for it in `s->meta`: after the
// CUDA call succeeds, set its key and insert it (neither allocates nor throws).
using meta_entry = graph_state::meta_map::node_type;
inline meta_entry stage_meta(graph_state& s, node_meta meta) {
  s.meta_staging.emplace(nullptr, std::move(meta));
  meta_entry entry = s.meta_staging.extract(s.meta_staging.begin());
  make_room_for_one(s.meta);
  return entry;
}

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
