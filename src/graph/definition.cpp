// graph_definition and graph_node: a definition's nodes and edges, what a node is and holds, its
// dependencies (re-wired in place) and its destruction. Nodes are added by the node factory
// (node_factory.cpp).
#include <algorithm>
#include <string>
#include <vector>

#include "cucore/error.hpp"
#include "graph/graph_state.hpp"
#include "runtime/runtime.hpp"

namespace cucore {

// ---- graph_node --------------------------------------------------------------------------------

namespace {

// A node that still exists: its graph and handle.
struct live_node {
  const std::shared_ptr<detail::graph_state>& graph;
  CUgraphNode node;
};

live_node live(const graph_node& n) {
  const auto& g = detail::graph_access::graph_of(n);
  if (!g) throw invalid_argument("the graph_node is empty");
  if (!detail::names_live_node(n)) throw invalid_argument("the graph_node was destroyed");
  return {g, detail::graph_access::handle_of(n)};
}

std::vector<graph_node> to_nodes(const std::shared_ptr<detail::graph_state>& s,
                                 const std::vector<CUgraphNode>& handles) {
  std::vector<graph_node> out;
  out.reserve(handles.size());
  for (CUgraphNode h : handles) out.push_back(detail::node_of(s, h));
  return out;
}

template <class Get>
std::vector<CUgraphNode> node_list(Get&& get, const char* call) {
  std::size_t n = 0;
  detail::check_driver(get(nullptr, &n), call);
  std::vector<CUgraphNode> out(n);
  if (n != 0) detail::check_driver(get(out.data(), &n), call);
  out.resize(n);
  return out;
}

// The nodes at the other end of `r`'s edges, as `query` lists them (cuGraphNodeGetDependencies
// or cuGraphNodeGetDependentNodes, without edge data).
template <class Query>
std::vector<graph_node> edge_ends(const live_node& r, Query query, const char* call) {
  return to_nodes(r.graph, node_list([&](CUgraphNode* out,
                                         std::size_t* n) { return query(r.node, out, nullptr, n); },
                                     call));
}

void check_kind(const graph_node& n, graph_node_kind want, const char* what) {
  const graph_node_kind k = n.kind();
  if (k != want) {
    throw invalid_argument(std::string(what) + " asked of a " + to_string(k) + " node");
  }
}

}  // namespace

bool graph_node::valid() const noexcept {
  return detail::names_live_node(*this);
}

CUgraphNode_st* graph_node::handle() const {
  return live(*this).node;
}

const std::shared_ptr<detail::graph_state>& graph_node::factory_state() const {
  return live(*this).graph;
}

graph_node_kind graph_node::kind() const {
  const auto& r = live(*this);
  CUgraphNodeType t{};
  detail::check_driver(detail::graph_driver().cuGraphNodeGetType(r.node, &t), "cuGraphNodeGetType");
  return detail::kind_of(t);
}

graph_definition graph_node::graph() const {
  return graph_definition(live(*this).graph);
}

std::vector<graph_node> graph_node::predecessors() const {
  const auto& r = live(*this);
  return edge_ends(r, detail::graph_driver().cuGraphNodeGetDependencies,
                   "cuGraphNodeGetDependencies");
}

std::vector<graph_node> graph_node::successors() const {
  const auto& r = live(*this);
  return edge_ends(r, detail::graph_driver().cuGraphNodeGetDependentNodes,
                   "cuGraphNodeGetDependentNodes");
}

namespace {

CUgraphNode same_graph_node(const live_node& self, const graph_node& other) {
  const auto& o = live(other);
  if (o.graph.get() != self.graph.get()) {
    throw invalid_argument(
        "the other node belongs to another graph: edges connect nodes of one graph");
  }
  return o.node;
}

void edit_edge(const live_node& self, const graph_node& other, bool incoming, bool add) {
  CUgraphNode o = same_graph_node(self, other);
  CUgraphNode from = incoming ? o : self.node;
  CUgraphNode to = incoming ? self.node : o;
  const auto& api = detail::graph_driver();
  if (add) {
    detail::check_driver(api.cuGraphAddDependencies(self.graph->graph, &from, &to, nullptr, 1),
                         "cuGraphAddDependencies");
  } else {
    detail::check_driver(api.cuGraphRemoveDependencies(self.graph->graph, &from, &to, nullptr, 1),
                         "cuGraphRemoveDependencies");
  }
}

void replace_edges(const live_node& self, const std::vector<graph_node>& current,
                   std::span<const graph_node> wanted, bool incoming) {
  std::vector<CUgraphNode> want;
  for (const graph_node& n : wanted) want.push_back(same_graph_node(self, n));
  for (const graph_node& n : current) {
    if (std::find(want.begin(), want.end(), n.handle()) == want.end()) {
      edit_edge(self, n, incoming, false);
    }
  }
  for (const graph_node& n : wanted) {
    if (std::find(current.begin(), current.end(), n) == current.end()) {
      edit_edge(self, n, incoming, true);
    }
  }
}

}  // namespace

void graph_node::add_predecessor(const graph_node& n) const {
  edit_edge(live(*this), n, true, true);
}
void graph_node::remove_predecessor(const graph_node& n) const {
  edit_edge(live(*this), n, true, false);
}
void graph_node::add_successor(const graph_node& n) const {
  edit_edge(live(*this), n, false, true);
}
void graph_node::remove_successor(const graph_node& n) const {
  edit_edge(live(*this), n, false, false);
}
void graph_node::set_predecessors(std::span<const graph_node> nodes) const {
  replace_edges(live(*this), predecessors(), nodes, true);
}
void graph_node::set_successors(std::span<const graph_node> nodes) const {
  replace_edges(live(*this), successors(), nodes, false);
}

kernel_node_params graph_node::kernel_params() const {
  check_kind(*this, graph_node_kind::kernel, "kernel_params");
  CUDA_KERNEL_NODE_PARAMS p{};
  detail::check_driver(detail::graph_driver().cuGraphKernelNodeGetParams(handle(), &p),
                       "cuGraphKernelNodeGetParams");
  kernel_node_params out;
  out.grid = {p.gridDimX, p.gridDimY, p.gridDimZ};
  out.block = {p.blockDimX, p.blockDimY, p.blockDimZ};
  out.shared_memory_bytes = p.sharedMemBytes;
  out.function = p.func;
  return out;
}

memcpy_node_params graph_node::memcpy_params() const {
  check_kind(*this, graph_node_kind::memcpy, "memcpy_params");
  CUDA_MEMCPY3D c{};
  detail::check_driver(detail::graph_driver().cuGraphMemcpyNodeGetParams(handle(), &c),
                       "cuGraphMemcpyNodeGetParams");
  auto side = [](CUmemorytype t, CUdeviceptr dev, const void* host) -> device_address {
    return t == CU_MEMORYTYPE_HOST
               ? static_cast<device_address>(reinterpret_cast<std::uintptr_t>(host))
               : dev;
  };
  return {side(c.dstMemoryType, c.dstDevice, c.dstHost),
          side(c.srcMemoryType, c.srcDevice, c.srcHost), c.WidthInBytes};
}

memset_node_params graph_node::memset_params() const {
  check_kind(*this, graph_node_kind::memset, "memset_params");
  CUDA_MEMSET_NODE_PARAMS p{};
  detail::check_driver(detail::graph_driver().cuGraphMemsetNodeGetParams(handle(), &p),
                       "cuGraphMemsetNodeGetParams");
  return {p.dst, p.value, p.elementSize, p.width, p.height, p.pitch};
}

mem_alloc_node_params graph_node::alloc_params() const {
  check_kind(*this, graph_node_kind::mem_alloc, "alloc_params");
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  detail::check_driver(detail::graph_driver().cuGraphMemAllocNodeGetParams(handle(), &p),
                       "cuGraphMemAllocNodeGetParams");
  return {p.dptr, p.bytesize, p.poolProps.location.id};
}

device_address graph_node::free_address() const {
  check_kind(*this, graph_node_kind::mem_free, "free_address");
  CUdeviceptr p = 0;
  detail::check_driver(detail::graph_driver().cuGraphMemFreeNodeGetParams(handle(), &p),
                       "cuGraphMemFreeNodeGetParams");
  return p;
}

CUevent_st* graph_node::event_handle() const {
  const graph_node_kind k = kind();
  CUevent e = nullptr;
  if (k == graph_node_kind::event_record) {
    detail::check_driver(detail::graph_driver().cuGraphEventRecordNodeGetEvent(handle(), &e),
                         "cuGraphEventRecordNodeGetEvent");
  } else if (k == graph_node_kind::event_wait) {
    detail::check_driver(detail::graph_driver().cuGraphEventWaitNodeGetEvent(handle(), &e),
                         "cuGraphEventWaitNodeGetEvent");
  } else {
    throw invalid_argument(std::string("event_handle asked of a ") + to_string(k) + " node");
  }
  return e;
}

graph_definition graph_node::child_graph() const {
  check_kind(*this, graph_node_kind::child_graph, "child_graph");
  const auto& r = live(*this);
  auto& m = r.graph->meta[r.node];
  if (m.bodies.empty()) {
    // Embedded by capture or in a clone: make the view now.
    CUgraph child = nullptr;
    detail::check_driver(detail::graph_driver().cuGraphChildGraphNodeGetGraph(r.node, &child),
                         "cuGraphChildGraphNodeGetGraph");
    m.bodies.push_back(detail::make_body(*r.graph, child, r.node));
  }
  return graph_definition(detail::view_of(r.graph, m.bodies[0].get()));
}

namespace {

const detail::node_meta& conditional_meta(const live_node& r) {
  const detail::node_entry* it = r.graph->meta.find(r.node);
  if (it == nullptr || !it->second.conditional) {
    throw invalid_argument(
        "not a conditional node built by cucore (conditional nodes of a clone, or built outside "
        "cucore, have no readable condition or bodies: CUDA has no call that returns them)");
  }
  return it->second;
}

}  // namespace

conditional_kind graph_node::conditional_type() const {
  return *conditional_meta(live(*this)).conditional;
}

graph_condition graph_node::condition() const {
  return conditional_meta(live(*this)).condition;
}

std::vector<graph_definition> graph_node::branches() const {
  const auto& r = live(*this);
  const auto& m = conditional_meta(r);
  if (m.bodies.empty()) {
    throw invalid_argument("the bodies of this conditional node (in a clone) are not known");
  }
  std::vector<graph_definition> out;
  for (const auto& b : m.bodies) out.push_back(graph_definition(detail::view_of(r.graph, b.get())));
  return out;
}

graph_definition graph_node::branch(std::size_t index) const {
  auto all = branches();
  if (index >= all.size()) {
    throw invalid_argument("branch " + std::to_string(index) + " of a conditional node with " +
                           std::to_string(all.size()) + " branch(es)");
  }
  return all[index];
}

void graph_node::destroy() {
  const auto& r = live(*this);
  const auto& api = detail::graph_driver();
  std::shared_ptr<detail::graph_state> s = r.graph;
  CUgraphNode node = r.node;
  // Everything that can fail before the node goes: the list of references to release.
  const auto releases = detail::releases_for(*s, node);
  detail::check_driver(api.cuGraphDestroyNode(node), "cuGraphDestroyNode");
  // Metadata first, then this graph's references (clones and executables keep theirs).
  detail::invalidate_node(*s, node);  // drops the entry: every graph_node of it is destroyed
  CUresult first_failure = CUDA_SUCCESS;
  detail::graph_state& top = detail::attachment_holder_state(*s);
  const detail::local_release_scope release(api);  // owners no graph needs go here
  for (const auto& [holder, object] : releases) {
    const CUresult r = api.cuGraphReleaseUserObject(holder, object, 1);
    if (r == CUDA_SUCCESS) detail::note_attachment_released(top, holder, object);
    if (r != CUDA_SUCCESS && first_failure == CUDA_SUCCESS) first_failure = r;
  }
  // The node is gone either way; a reference that could not be released stays with its graph
  // (released when that graph is destroyed), never released early.
  detail::check_driver(first_failure, "cuGraphReleaseUserObject");
}

// ---- graph_definition --------------------------------------------------------------------------

graph_definition::graph_definition(const cucore::device& dev) {
  const auto& api = detail::graph_driver();
  CUgraph g = nullptr;
  detail::check_driver(api.cuGraphCreate(&g, 0), "cuGraphCreate");
  state_ = detail::adopt_root_graph(g, dev.ordinal());
}

bool graph_definition::valid() const noexcept {
  return state_ != nullptr && !state_->invalid;
}

const std::shared_ptr<detail::graph_state>& graph_definition::factory_state() const {
  if (!state_) throw invalid_argument("the graph_definition is empty");
  detail::check_usable(*state_);
  return state_;
}

CUgraph_st* graph_definition::handle() const {
  return factory_state()->graph;
}

cucore::device graph_definition::device() const {
  return cucore::device(factory_state()->device);
}

graph_condition graph_definition::create_condition(std::optional<unsigned> default_value) const {
  return detail::create_condition(detail::graph_driver(), *factory_state(), default_value);
}

std::vector<graph_node> graph_definition::nodes() const {
  const auto& s = factory_state();
  const auto& api = detail::graph_driver();
  return to_nodes(s,
                  node_list([&](CUgraphNode* out,
                                std::size_t* n) { return api.cuGraphGetNodes(s->graph, out, n); },
                            "cuGraphGetNodes"));
}

std::size_t graph_definition::node_count() const {
  const auto& s = factory_state();
  std::size_t n = 0;
  detail::check_driver(detail::graph_driver().cuGraphGetNodes(s->graph, nullptr, &n),
                       "cuGraphGetNodes");
  return n;
}

std::vector<std::pair<graph_node, graph_node>> graph_definition::edges() const {
  const auto& s = factory_state();
  const auto& api = detail::graph_driver();
  std::size_t n = 0;
  detail::check_driver(api.cuGraphGetEdges(s->graph, nullptr, nullptr, nullptr, &n),
                       "cuGraphGetEdges");
  std::vector<CUgraphNode> from(n), to(n);
  if (n != 0) {
    detail::check_driver(api.cuGraphGetEdges(s->graph, from.data(), to.data(), nullptr, &n),
                         "cuGraphGetEdges");
  }
  std::vector<std::pair<graph_node, graph_node>> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    out.emplace_back(detail::node_of(s, from[i]), detail::node_of(s, to[i]));
  }
  return out;
}

graph_definition graph_definition::clone() const {
  return graph_definition(detail::clone_whole(detail::graph_driver(), *factory_state()));
}

graph graph_definition::instantiate(const graph_instantiate_options& options) const {
  return detail::instantiate_graph(detail::graph_driver(), *factory_state(), options);
}

void graph_definition::debug_dot_print(const std::filesystem::path& path,
                                       const graph_dot_options& options) const {
  detail::dot_print(detail::graph_driver(), *factory_state(), path, options);
}

}  // namespace cucore
