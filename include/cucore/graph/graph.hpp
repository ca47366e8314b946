// An executable CUDA graph (CUgraphExec): instantiated from a graph_definition or completed from a
// graph_builder. It holds CUDA's references to the owners of every node it can run, so the
// definition it came from may be changed or destroyed while it stays launchable.
#pragma once

#include <memory>

#include "cucore/graph/definition.hpp"
#include "cucore/runtime/stream.hpp"

struct CUgraphExec_st;  // the driver's executable graph (CUgraphExec), opaque here

namespace cucore {

class graph_builder;

class graph {
 public:
  graph() noexcept = default;
  graph(graph&&) noexcept = default;
  graph& operator=(graph&&) noexcept = default;
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  ~graph() = default;

  bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  CUgraphExec_st* handle() const;
  cucore::device device() const;

  void launch(stream_ref s) const;
  void upload(stream_ref s) const;

  // Updates the parameters of this executable graph in place from a definition with the same
  // topology (cuGraphExecUpdate). On failure the graph is unchanged and the cuda_error says why
  // (which node, and the driver's reason). The new owners are taken, the replaced ones released.
  void update(const graph_definition& source);
  void update(const graph_builder& source);  // the builder must have ended building

  // Destroys the executable graph (an in-flight launch finishes first; its owners are released
  // after it). Idempotent.
  void close() noexcept { state_.reset(); }

 private:
  friend struct detail::graph_access;
  struct state;
  explicit graph(std::shared_ptr<state> s) noexcept : state_(std::move(s)) {}
  std::shared_ptr<state> state_;
};

}  // namespace cucore
