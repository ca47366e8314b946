#include "graph/graph_state.hpp"

#include <bit>
#include <cstddef>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/enum_names.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "runtime/runtime.hpp"

namespace cucore {
namespace detail {

// A table entry is one of the pool's small blocks, and moving a node_meta into it cannot fail.
static_assert(sizeof(node_entry) <= entry_pool::kMaxBlock);
static_assert(alignof(node_entry) <= alignof(std::max_align_t));
static_assert(std::is_nothrow_move_constructible_v<node_meta>);

namespace {

// Chunks of destroyed graphs' pools, kept for the next graphs (of any thread): a program that
// builds and destroys graphs in a loop reuses memory already mapped instead of asking the heap
// again (which returns large freed ranges to the system and faults them back in).
class chunk_cache {
 public:
  chunk_cache() { spare_.reserve(kMaxSpare); }
  // A spare chunk, or a new one (every chunk has entry_pool's size: `bytes`).
  std::unique_ptr<std::byte[]> take(std::size_t bytes) {
    {
      const std::lock_guard lock(mutex_);
      if (!spare_.empty()) {
        std::unique_ptr<std::byte[]> c = std::move(spare_.back());
        spare_.pop_back();
        return c;
      }
    }
    return std::make_unique_for_overwrite<std::byte[]>(bytes);
  }
  // Keeps as many of `chunks` as there is room for (the vector's capacity never grows, so this
  // cannot fail); the rest are freed when `chunks` goes.
  void give(std::vector<std::unique_ptr<std::byte[]>>& chunks) noexcept {
    const std::lock_guard lock(mutex_);
    while (!chunks.empty() && spare_.size() < kMaxSpare) {
      spare_.push_back(std::move(chunks.back()));
      chunks.pop_back();
    }
  }

 private:
  static constexpr std::size_t kMaxSpare = 256;  // 1 MiB
  std::mutex mutex_;
  std::vector<std::unique_ptr<std::byte[]>> spare_;
};

// Never destroyed: graphs may be destroyed during exit.
chunk_cache& chunks() {
  static chunk_cache* c = new chunk_cache;
  return *c;
}

}  // namespace

entry_pool::~entry_pool() {
  chunks().give(chunks_);
}

void* entry_pool::do_allocate(std::size_t bytes, std::size_t align) {
  if (bytes > kMaxBlock || align > kAlign) {
    return std::pmr::new_delete_resource()->allocate(bytes, align);
  }
  const std::size_t c = size_class(bytes);
  if (free_block* b = free_[c]) {
    free_[c] = b->next;
    return b;
  }
  const std::size_t size = c * kAlign;
  if (static_cast<std::size_t>(chunk_end_ - chunk_next_) < size) new_chunk();
  void* p = chunk_next_;
  chunk_next_ += size;
  return p;
}

void entry_pool::do_deallocate(void* p, std::size_t bytes, std::size_t align) {
  if (bytes > kMaxBlock || align > kAlign) {
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
    return;
  }
  auto* b = static_cast<free_block*>(p);
  b->next = free_[size_class(bytes)];
  free_[size_class(bytes)] = b;
}

void entry_pool::new_chunk() {
  chunks_.reserve(chunks_.size() + 1);  // so the push below cannot fail after the allocation
  // operator new[] aligns for any fundamental type (16 bytes here), and blocks are multiples of 16.
  chunks_.push_back(chunks().take(kChunk));
  chunk_next_ = chunks_.back().get();
  chunk_end_ = chunk_next_ + kChunk;
}

node_table::~node_table() {
  for (std::size_t i = 0; i < capacity_; ++i) {
    if (node_entry* e = slots_[i]) {
      e->~node_entry();
      pool_->deallocate(e, sizeof(node_entry), alignof(node_entry));
    }
  }
}

node_meta& node_table::operator[](CUgraphNode node) {
  if (node_entry* e = find(node)) return e->second;
  reserve_one();
  return emplace(node, node_meta{});
}

void node_table::reserve_one() {
  // At most half full: probes stay short, and an empty slot always ends a search.
  if (2 * (size_ + 1) > capacity_) grow(capacity_ == 0 ? 16 : 2 * capacity_);
  pool_->reserve();
}

void node_table::grow(std::size_t capacity) {
  auto slots = std::make_unique<node_entry*[]>(capacity);  // value-initialized: all empty
  std::unique_ptr<node_entry*[]> old = std::exchange(slots_, std::move(slots));
  const std::size_t old_capacity = std::exchange(capacity_, capacity);
  shift_ = 64 - static_cast<unsigned>(std::countr_zero(capacity));
  for (std::size_t i = 0; i < old_capacity; ++i) {
    if (node_entry* e = old[i]) *slot_of(e->first) = e;
  }
}

node_meta& node_table::emplace(CUgraphNode node, node_meta&& meta) noexcept {
  void* p = pool_->allocate(sizeof(node_entry), alignof(node_entry));  // reserved: cannot fail
  auto* e = new (p) node_entry{node, std::move(meta)};
  *slot_of(node) = e;
  ++size_;
  return e->second;
}

void node_table::erase(node_entry* e) noexcept {
  const std::size_t mask = capacity_ - 1;
  std::size_t hole = static_cast<std::size_t>(slot_of(e->first) - slots_.get());
  // Backward-shift deletion: move later entries of the probe run into the hole when their home
  // slot is not between the hole and where they are, so every search still finds them.
  for (std::size_t j = (hole + 1) & mask; slots_[j] != nullptr; j = (j + 1) & mask) {
    const std::size_t h = home(slots_[j]->first);
    const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    slots_[hole] = slots_[j];
    hole = j;
  }
  slots_[hole] = nullptr;
  --size_;
  e->~node_entry();
  pool_->deallocate(e, sizeof(node_entry), alignof(node_entry));
}

graph_state::~graph_state() {
  if (owns && graph != nullptr && driver_alive()) {
    // CUDA destroys the embedded child and body graphs with it and drops every user-object
    // reference the graph holds. The owners of those it destroys now (none of their nodes can
    // run elsewhere) are dropped here, on this thread, before the destructor returns; the others
    // when the driver lets go of them, on the release thread.
    const driver_api& api = graph_driver();
    const local_release_scope release(api);
    log_driver_failure(api.cuGraphDestroy(graph), "cuGraphDestroy");
  }
}

const driver_api& graph_driver() {
  // Looked up once: every node add asks for it. A failure (no driver) is not kept, so it is
  // reported again on the next use.
  static const driver_api* const api = &runtime_driver("CUDA graphs");
  return *api;
}

std::shared_ptr<graph_state> adopt_root_graph(CUgraph g, int device) {
  std::shared_ptr<graph_state> s;
  try {
    s = std::make_shared<graph_state>();
  } catch (...) {
    log_driver_failure(graph_driver().cuGraphDestroy(g), "cuGraphDestroy");
    throw;
  }
  s->graph = g;
  s->device = device;
  s->owns = true;
  return s;
}

std::unique_ptr<graph_state> make_body(graph_state& parent, CUgraph g, CUgraphNode owner_node) {
  auto body = std::make_unique<graph_state>();
  body->graph = g;
  body->device = parent.device;
  body->parent = &parent;
  body->owner_node = owner_node;
  return body;
}

std::shared_ptr<graph_state> view_of(const std::shared_ptr<graph_state>& any_view,
                                     graph_state* child) {
  return std::shared_ptr<graph_state>(any_view, child);
}

graph_node node_of(const std::shared_ptr<graph_state>& state, CUgraphNode node) {
  node_meta& m = state->meta[node];
  if (m.serial == 0) m.serial = ++state->last_serial;
  return graph_access::node(state, node, m.serial);
}

bool names_live_node(const graph_node& n) noexcept {
  const auto& g = graph_access::graph_of(n);
  if (!g || g->invalid) return false;
  if (g->erased_entries == 0) return graph_access::serial_of(n) != 0;
  const node_entry* e = g->meta.find(graph_access::handle_of(n));
  return e != nullptr && e->second.serial == graph_access::serial_of(n);
}

void check_usable(const graph_state& s) {
  if (s.invalid) {
    throw invalid_argument(
        "this child or conditional-body graph belonged to a node that was destroyed; it can no "
        "longer be used (keep the node, or build a new graph)");
  }
}

CUgraph attachment_holder(const graph_state& s) noexcept {
  const graph_state* top = &s;
  while (top->parent != nullptr) top = top->parent;
  return top->graph;
}

graph_state& attachment_holder_state(graph_state& s) noexcept {
  graph_state* top = &s;
  while (top->parent != nullptr) top = top->parent;
  return *top;
}

namespace {

// Where the references of a copy's attachments end up. `path`: each source graph from the copied
// one down to the one being imported, with its copy (CUDA copied the references these hold).
// `outer`: the graphs above the copied one when it is a view (its ancestors hold the references
// of nodes added through it); CUDA copied none of those, so the copy's top graph retains new ones.
struct import_scope {
  std::vector<std::pair<CUgraph, CUgraph>> path;
  std::vector<CUgraph> outer;
  CUgraph top_copy = nullptr;
};

// The copy's holder of `object`, held by `holder` in the source; nullptr when it is held where
// the copy cannot name it (the reference stays with that graph).
CUgraph copied_holder(const driver_api& api, const import_scope& scope, CUgraph holder,
                      CUuserObject object) {
  for (const auto& [from, to] : scope.path) {
    if (from == holder) return to;
  }
  for (CUgraph g : scope.outer) {
    if (g != holder) continue;
    check_driver(api.cuGraphRetainUserObject(scope.top_copy, object, 1, 0),
                 "cuGraphRetainUserObject");
    return scope.top_copy;
  }
  return nullptr;
}

void import_into(const driver_api& api, graph_state& clone, const graph_state& source,
                 import_scope& scope) {
  scope.path.emplace_back(source.graph, clone.graph);
  for (const auto& [node, m] : source.meta) {
    CUgraphNode cloned = nullptr;
    if (api.cuGraphNodeFindInClone(&cloned, node, clone.graph) != CUDA_SUCCESS || !cloned) {
      continue;  // not in this clone: its references stay with the clone until it is destroyed
    }
    node_meta& copy = clone.meta[cloned];
    if (m.attachment != nullptr) {
      // The same user object; a graph of the copy holds its own reference to it.
      copy.holder = copied_holder(api, scope, m.holder, m.attachment);
      copy.attachment = copy.holder != nullptr ? m.attachment : nullptr;
    }
    copy.conditional = m.conditional;
    copy.condition = m.condition;
    if (!m.conditional && m.bodies.size() == 1 && m.bodies[0] && !m.bodies[0]->invalid) {
      CUgraph child = nullptr;
      check_driver(api.cuGraphChildGraphNodeGetGraph(cloned, &child),
                   "cuGraphChildGraphNodeGetGraph");
      auto body = make_body(clone, child, cloned);
      import_into(api, *body, *m.bodies[0], scope);
      copy.bodies.push_back(std::move(body));
    }
  }
  scope.path.pop_back();
}

void collect_inside(const graph_state& body, std::vector<const graph_state*>& inside) {
  inside.push_back(&body);
  for (const auto& [node, m] : body.meta) {
    for (const auto& b : m.bodies) {
      if (b) collect_inside(*b, inside);
    }
  }
}

}  // namespace

namespace {

bool is_conditional_body(const graph_state& s) {
  if (s.parent == nullptr) return false;
  const node_entry* e = s.parent->meta.find(s.owner_node);
  return e != nullptr && e->second.conditional.has_value();
}

}  // namespace

void import_clone_metadata(const driver_api& api, graph_state& clone, const graph_state& source) {
  import_scope scope;
  scope.top_copy = clone.graph;
  for (const graph_state* up = source.parent; up != nullptr; up = up->parent) {
    scope.outer.push_back(up->graph);
  }
  import_into(api, clone, source, scope);
}

std::shared_ptr<graph_state> clone_whole(const driver_api& api, const graph_state& s) {
  check_usable(s);
  CUgraph c = nullptr;
  const CUresult r = api.cuGraphClone(&c, s.graph);
  if (r != CUDA_SUCCESS) {
    check_driver(
        r, "cuGraphClone",
        is_conditional_body(s) && r == CUDA_ERROR_NOT_SUPPORTED
            ? "CUDA does not clone a conditional node's body graph on its own, so a view of "
              "a body cannot be cloned, embedded, instantiated or used to update: build "
              "the body's work as a graph of its own, embed it into the body, and copy "
              "that graph"
            : conditional_graph_rule(api, s, r, true));
  }
  auto copy = adopt_root_graph(c, s.device);
  import_clone_metadata(api, *copy, s);  // on failure, destroying the copy drops what it retained
  return copy;
}

std::shared_ptr<graph_state> whole_copy_of_view(const driver_api& api, const graph_state& s) {
  check_usable(s);
  if (s.parent == nullptr) return nullptr;
  return clone_whole(api, s);
}

std::vector<std::pair<CUgraph, CUuserObject>> releases_for(const graph_state& s, CUgraphNode node) {
  std::vector<std::pair<CUgraph, CUuserObject>> out;
  const node_entry* it = s.meta.find(node);
  if (it == nullptr) return out;
  if (it->second.attachment != nullptr) out.emplace_back(it->second.holder, it->second.attachment);
  // References held by graphs inside the destroyed node die with them (CUDA drops them); the
  // others are held by a graph that survives and must be released there.
  std::vector<const graph_state*> inside;
  for (const auto& b : it->second.bodies) {
    if (b) collect_inside(*b, inside);
  }
  for (const graph_state* g : inside) {
    for (const auto& [n, m] : g->meta) {
      if (m.attachment == nullptr) continue;
      bool held_inside = false;
      for (const graph_state* other : inside) held_inside = held_inside || other->graph == m.holder;
      if (!held_inside) out.emplace_back(m.holder, m.attachment);
    }
  }
  return out;
}

namespace {

void mark_destroyed(graph_state& s) noexcept {
  s.invalid = true;
  for (auto& [node, m] : s.meta) {
    for (auto& body : m.bodies) {
      if (body) mark_destroyed(*body);
    }
  }
}

}  // namespace

void invalidate_node(graph_state& s, CUgraphNode node) noexcept {
  node_entry* it = s.meta.find(node);
  if (it == nullptr) return;
  for (auto& body : it->second.bodies) {
    if (!body) continue;
    mark_destroyed(*body);
    try {
      s.graveyard.push_back(std::move(body));
    } catch (...) {
      // Out of memory: the body state dies here; views of it already see it as invalid, but they
      // point at it, so keep it reachable by leaking it instead.
      (void)body.release();
    }
  }
  s.meta.erase(it);
  ++s.erased_entries;
}

graph_node_kind kind_of(CUgraphNodeType t) noexcept {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return graph_node_kind::kernel;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return graph_node_kind::memcpy;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return graph_node_kind::memset;
    case CU_GRAPH_NODE_TYPE_HOST:
      return graph_node_kind::host_callback;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return graph_node_kind::child_graph;
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return graph_node_kind::empty;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return graph_node_kind::event_wait;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return graph_node_kind::event_record;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return graph_node_kind::mem_alloc;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return graph_node_kind::mem_free;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return graph_node_kind::conditional;
    default:
      return graph_node_kind::other;
  }
}

unsigned dot_flags(const graph_dot_options& o) noexcept {
  unsigned f = 0;
  if (o.verbose) f |= CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE;
  if (o.runtime_types) f |= CU_GRAPH_DEBUG_DOT_FLAGS_RUNTIME_TYPES;
  if (o.kernel_node_params) f |= CU_GRAPH_DEBUG_DOT_FLAGS_KERNEL_NODE_PARAMS;
  if (o.memcpy_node_params) f |= CU_GRAPH_DEBUG_DOT_FLAGS_MEMCPY_NODE_PARAMS;
  if (o.memset_node_params) f |= CU_GRAPH_DEBUG_DOT_FLAGS_MEMSET_NODE_PARAMS;
  if (o.host_node_params) f |= CU_GRAPH_DEBUG_DOT_FLAGS_HOST_NODE_PARAMS;
  if (o.event_node_params) f |= CU_GRAPH_DEBUG_DOT_FLAGS_EVENT_NODE_PARAMS;
  if (o.kernel_node_attributes) f |= CU_GRAPH_DEBUG_DOT_FLAGS_KERNEL_NODE_ATTRIBUTES;
  if (o.handles) f |= CU_GRAPH_DEBUG_DOT_FLAGS_HANDLES;
  if (o.mem_alloc_node_params) f |= CU_GRAPH_DEBUG_DOT_FLAGS_MEM_ALLOC_NODE_PARAMS;
  if (o.mem_free_node_params) f |= CU_GRAPH_DEBUG_DOT_FLAGS_MEM_FREE_NODE_PARAMS;
  if (o.extra_topo_info) f |= CU_GRAPH_DEBUG_DOT_FLAGS_EXTRA_TOPO_INFO;
  if (o.conditional_node_params) f |= CU_GRAPH_DEBUG_DOT_FLAGS_CONDITIONAL_NODE_PARAMS;
  return f;
}

namespace {

const char* instantiate_result_text(CUgraphInstantiateResult r) noexcept {
  switch (r) {
    case CUDA_GRAPH_INSTANTIATE_ERROR:
      return "instantiation failed for an unexpected reason (see the driver's error)";
    case CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE:
      return "the graph's structure is invalid (for example a cycle)";
    case CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED:
      return "a node's operation is not supported with these options (for example device_launch "
             "with a host callback)";
    case CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED:
      return "the graph's nodes run in more than one context, which these options do not allow";
    case CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED:
      return "a condition created for the graph is used by none of its conditional nodes";
    default:
      return nullptr;
  }
}

// Whether `g` or a child graph inside it holds a conditional node (asked of the driver: nodes
// built outside cucore count too). Only for error messages: false when the driver will not say.
bool holds_conditional_node(const driver_api& api, CUgraph g, int depth = 0) {
  if (depth > 64) return false;
  std::size_t n = 0;
  if (api.cuGraphGetNodes(g, nullptr, &n) != CUDA_SUCCESS || n == 0) return false;
  std::vector<CUgraphNode> nodes(n);
  if (api.cuGraphGetNodes(g, nodes.data(), &n) != CUDA_SUCCESS) return false;
  for (std::size_t i = 0; i < n; ++i) {
    CUgraphNodeType t{};
    if (api.cuGraphNodeGetType(nodes[i], &t) != CUDA_SUCCESS) continue;
    if (t == CU_GRAPH_NODE_TYPE_CONDITIONAL) return true;
    CUgraph child = nullptr;
    if (t == CU_GRAPH_NODE_TYPE_GRAPH &&
        api.cuGraphChildGraphNodeGetGraph(nodes[i], &child) == CUDA_SUCCESS &&
        holds_conditional_node(api, child, depth + 1)) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string_view conditional_graph_rule(const driver_api& api, const graph_state& s, CUresult r,
                                        bool cloning) {
  if (r != CUDA_ERROR_NOT_SUPPORTED || !holds_conditional_node(api, s.graph)) return {};
  if (cloning) {
    return "the graph holds conditional nodes, which the CUDA driver does not clone (nor embed, "
           "which clones): build a second definition the same way instead";
  }
  return "the graph holds conditional nodes, and the CUDA driver allows such a graph one "
         "executable graph at a time: destroy the cucore::graph instantiated from this definition "
         "first (or update() it), or build a second definition the same way and instantiate that";
}

cucore::graph instantiate_graph(const driver_api& api, const graph_state& s,
                                const graph_instantiate_options& o) {
  // A view's executable graph is made from a whole copy, which holds every owner (the copy goes,
  // the executable graph keeps its own references).
  const auto whole = whole_copy_of_view(api, s);
  const graph_state& source = whole ? *whole : s;
  scoped_context scope(api, s.device);
  CUDA_GRAPH_INSTANTIATE_PARAMS p{};
  if (o.auto_free_on_launch) p.flags |= CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
  if (o.device_launch) p.flags |= CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH;
  if (o.use_node_priority) p.flags |= CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (o.upload_stream) {
    p.flags |= CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    p.hUploadStream = o.upload_stream->handle();
  }
  CUgraphExec exec = nullptr;
  const CUresult r = api.cuGraphInstantiateWithParams(&exec, source.graph, &p);
  if (r != CUDA_SUCCESS || p.result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS) {
    if (exec != nullptr) api.cuGraphExecDestroy(exec);
    const char* why = instantiate_result_text(p.result_out);
    std::string detail = why ? why : "";
    if (const auto rule = conditional_graph_rule(api, s, r, false); !rule.empty()) detail = rule;
    if (r == CUDA_SUCCESS) {
      throw cuda_error(CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE",
                       "cuGraphInstantiateWithParams", detail);
    }
    try {
      check_driver(r, "cuGraphInstantiateWithParams");
    } catch (const cuda_error& e) {
      if (detail.empty()) throw;
      throw cuda_error(e.result(), e.result_name(), e.call(), detail);
    }
  }
  return graph_access::executable(exec, s.device);
}

void dot_print(const driver_api& api, const graph_state& s, const std::filesystem::path& path,
               const graph_dot_options& options) {
  check_usable(s);
  check_driver(api.cuGraphDebugDotPrint(s.graph, path.c_str(), dot_flags(options)),
               "cuGraphDebugDotPrint");
}

graph_condition create_condition(const driver_api& api, const graph_state& s,
                                 std::optional<unsigned> default_value) {
  check_usable(s);
  scoped_context scope(api, s.device);
  CUgraphConditionalHandle h = 0;
  check_driver(api.cuGraphConditionalHandleCreate(&h, s.graph, primary_context(s.device),
                                                  default_value.value_or(0),
                                                  default_value ? CU_GRAPH_COND_ASSIGN_DEFAULT : 0),
               "cuGraphConditionalHandleCreate");
  return graph_access::condition(h, s.graph);
}

CUgraphNodeParams conditional_params(const graph_state& s, const graph_condition& c,
                                     conditional_kind kind, unsigned count, CUgraph* bodies_out) {
  if (c.handle() == 0 && c.graph_handle() == nullptr) {
    throw invalid_argument("the graph_condition is empty: create it with create_condition()");
  }
  if (c.graph_handle() != s.graph) {
    throw invalid_argument(
        "the graph_condition was created by another graph: a conditional node needs a condition "
        "from the graph it is added to (create_condition() on that graph)");
  }
  if (kind == conditional_kind::switch_ && count == 0) {
    throw invalid_argument("switch_ needs at least one branch (count 0 given)");
  }
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = c.handle();
  p.conditional.ctx = primary_context(s.device);
  p.conditional.phGraph_out = bodies_out;
  switch (kind) {
    case conditional_kind::if_then:
      p.conditional.type = CU_GRAPH_COND_TYPE_IF;
      p.conditional.size = 1;
      break;
    case conditional_kind::if_else:
      p.conditional.type = CU_GRAPH_COND_TYPE_IF;
      p.conditional.size = 2;
      break;
    case conditional_kind::while_loop:
      p.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
      p.conditional.size = 1;
      break;
    case conditional_kind::switch_:
      p.conditional.type = CU_GRAPH_COND_TYPE_SWITCH;
      p.conditional.size = count;
      break;
  }
  return p;
}

std::shared_ptr<void> copy_user_data(std::span<const std::byte> data) {
  const std::size_t words = (data.size() + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  std::shared_ptr<std::max_align_t[]> copy = std::make_shared<std::max_align_t[]>(words);
  if (!data.empty()) std::memcpy(copy.get(), data.data(), data.size());
  return std::shared_ptr<void>(copy, copy.get());
}

void invoke_host_callable_guarded(void* callable, void (*call)(void*)) noexcept {
  try {
    call(callable);
  } catch (const std::exception& e) {
    log(log_level::error,
        std::string("a graph host callback threw (callbacks must not throw): ") + e.what());
    std::terminate();
  } catch (...) {
    log(log_level::error, "a graph host callback threw a non-standard exception");
    std::terminate();
  }
}

}  // namespace detail

constexpr auto kGraphNodeKindNames = detail::name_each<graph_node_kind::other>(
    "kernel", "memcpy", "memset", "host_callback", "child_graph", "empty", "event_wait",
    "event_record", "mem_alloc", "mem_free", "conditional", "other");

const char* to_string(graph_node_kind kind) noexcept {
  return kGraphNodeKindNames(kind, "other").data();
}

constexpr auto kConditionalKindNames =
    detail::name_each<conditional_kind::switch_>("if_then", "if_else", "while_loop", "switch_");

const char* to_string(conditional_kind kind) noexcept {
  return kConditionalKindNames(kind, "if_then").data();
}

void kernel_arguments::push(const graph_condition& c) {
  const unsigned long long h = c.handle();
  push_bytes(&h, sizeof(h), alignof(unsigned long long));
}

}  // namespace cucore
