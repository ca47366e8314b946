// The executable graph. CUDA copied every user-object reference of the source graph into it at
// instantiation, so it needs no attachment metadata of its own: destroying it (after its in-flight
// launches) drops those references, and cuGraphExecUpdate moves them to the new parameters.
#include "cucore/graph/graph.hpp"

#include <string>

#include "cucore/error.hpp"
#include "graph/graph_state.hpp"
#include "runtime/runtime.hpp"

namespace cucore {

struct graph::state {
  CUgraphExec exec = nullptr;
  int device = 0;
  state() = default;
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() {
    if (exec != nullptr && detail::driver_alive()) {
      // With no launch in flight, the driver destroys the user objects only this graph held
      // now: their owners are dropped here (see local_release_scope).
      const auto& api = detail::graph_driver();
      const detail::local_release_scope release(api);
      detail::log_driver_failure(api.cuGraphExecDestroy(exec), "cuGraphExecDestroy");
    }
  }
};

graph detail::graph_access::executable(CUgraphExec exec, int device) {
  std::shared_ptr<graph::state> s;
  try {
    s = std::make_shared<graph::state>();
  } catch (...) {
    graph_driver().cuGraphExecDestroy(exec);
    throw;
  }
  s->exec = exec;
  s->device = device;
  return graph(std::move(s));
}

std::shared_ptr<const void> detail::graph_access::executable_owner(const graph& g) {
  return g.state_;
}

// Here rather than in runtime/launch.cpp: only the graph module knows what keeps a graph alive.
void kernel_arguments::push(const graph& g) {
  if (!g.valid()) {
    throw invalid_argument(
        "kernel argument: the cucore::graph is empty (default-constructed, moved from or "
        "closed); pass an instantiated graph");
  }
  CUgraphExec exec = g.handle();
  push_owner(detail::graph_access::executable_owner(g));
  push_bytes(&exec, sizeof(exec), alignof(CUgraphExec));
}

namespace {

const char* update_result_text(CUgraphExecUpdateResult r) noexcept {
  switch (r) {
    case CU_GRAPH_EXEC_UPDATE_ERROR:
      return "invalid value";
    case CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED:
      return "the graph's topology changed (nodes or edges were added or removed)";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED:
      return "a node's type changed";
    case CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED:
      return "a kernel node's function changed in a way update does not support";
    case CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED:
      return "a node's parameters changed in a way update does not support";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED:
      return "something about the node is not supported by update";
    case CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE:
      return "a kernel node's function changed in an unsupported way";
    case CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED:
      return "a node's attributes changed in a way update does not support";
    default:
      return "unknown reason";
  }
}

}  // namespace

CUgraphExec_st* graph::handle() const {
  if (!state_) detail::throw_empty("graph");
  return state_->exec;
}

cucore::device graph::device() const {
  if (!state_) detail::throw_empty("graph");
  return cucore::device(state_->device);
}

void graph::launch(stream_ref s) const {
  CUgraphExec exec = handle();
  const auto& api = detail::graph_driver();
  detail::scoped_context scope(api, s.device().ordinal());
  detail::check_driver(api.cuGraphLaunch(exec, s.handle()), "cuGraphLaunch");
}

void graph::upload(stream_ref s) const {
  CUgraphExec exec = handle();
  const auto& api = detail::graph_driver();
  detail::scoped_context scope(api, s.device().ordinal());
  detail::check_driver(api.cuGraphUpload(exec, s.handle()), "cuGraphUpload");
}

void graph::update(const graph_definition& source) {
  CUgraphExec exec = handle();
  CUgraph g = source.handle();  // throws for an empty or destroyed definition
  const auto& api = detail::graph_driver();
  // From a view, through a whole copy of it: the executable graph takes the references of the
  // graph it is updated from, and a view's owners are held by its ancestors.
  const auto whole = detail::whole_copy_of_view(api, *detail::graph_access::state(source));
  if (whole) g = whole->graph;
  detail::scoped_context scope(api, state_->device);
  CUgraphExecUpdateResultInfo info{};
  const CUresult r = api.cuGraphExecUpdate(exec, g, &info);
  if (r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
    std::string detail = std::string("graph update failed: ") + update_result_text(info.result);
    if (info.errorNode != nullptr) {
      CUgraphNodeType t{};
      if (api.cuGraphNodeGetType(info.errorNode, &t) == CUDA_SUCCESS) {
        detail += std::string(" (at a ") + to_string(detail::kind_of(t)) + " node)";
      }
    }
    detail += "; the executable graph is unchanged: instantiate the new definition instead";
    throw cuda_error(r, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "cuGraphExecUpdate", detail);
  }
  detail::check_driver(r, "cuGraphExecUpdate");
}

void graph::update(const graph_builder& source) {
  if (!source.valid() || source.builder_state() == graph_builder::state::closed) {
    throw invalid_argument("graph::update: the source graph_builder has been closed");
  }
  if (source.builder_state() != graph_builder::state::ended) {
    throw invalid_argument(
        "graph::update: the source graph_builder has not finished building (call "
        "end_building() first)");
  }
  update(detail::graph_access::definition(detail::graph_access::builder_state(source)));
}

}  // namespace cucore
