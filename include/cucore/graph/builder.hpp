// Building a CUDA graph by stream capture.
//
// Lifetime contract: operations captured into the graph (launches, buffer copies and fills, event
// records) reference your memory but do not retain it; keep their operands alive for as long as
// the graph or an executable graph made from it may run. Host callbacks added with callback() are
// the exception: the callable and any copied user data are retained by the captured graph. Nodes
// added explicitly through graph_definition() (or a conditional body's view) retain their owners
// as a graph_definition always does. See docs/graphs.md.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "cucore/graph/definition.hpp"
#include "cucore/graph/graph.hpp"
#include "cucore/runtime/stream.hpp"

namespace cucore {

// How capture treats potentially unsafe API calls made while it runs (CUstreamCaptureMode).
enum class capture_mode { global, thread_local_, relaxed };

class graph_builder {
 public:
  // What a builder is: the one that owns the captured graph, one made by split() (it shares the
  // primary's graph), or the body of a conditional node.
  enum class kind { primary, forked, conditional_body };
  enum class state { not_started, capturing, ended, closed };

  graph_builder() noexcept;
  // Captures on a new non-blocking stream of `dev`.
  explicit graph_builder(const cucore::device& dev);
  // Captures on `s` (kept alive by the builder).
  explicit graph_builder(const cucore::stream& s);
  graph_builder(graph_builder&&) noexcept;
  graph_builder& operator=(graph_builder&&) noexcept;
  graph_builder(const graph_builder&) = delete;
  graph_builder& operator=(const graph_builder&) = delete;
  // Ends a capture still in progress (discarding it) and releases the stream.
  ~graph_builder();

  bool valid() const noexcept { return impl_ != nullptr; }
  kind builder_kind() const;
  state builder_state() const;
  stream_ref stream() const;

  graph_builder& begin_building(capture_mode mode = capture_mode::relaxed);
  // Whether the stream is capturing now; a capture the driver invalidated is a cuda_error.
  bool is_building() const;
  graph_builder& end_building();

  graph complete(const graph_instantiate_options& options = {}) const;
  void debug_dot_print(const std::filesystem::path& path,
                       const graph_dot_options& options = {}) const;

  // Forks the capture into `count` branches: this builder is the first, and the `count - 1`
  // returned builders (kind forked) capture on their own streams, ordered after what was captured
  // so far. join() them back before end_building(). If it throws, the capture is as before (no
  // fork is left in it).
  std::vector<graph_builder> split(unsigned count);
  // Makes this builder's capture wait for everything `others` captured, then closes them. If it
  // throws, `others` are left as they were (still capturing, still to be joined).
  void join(std::vector<graph_builder>&& others);
  bool is_join_required() const;

  // Conditional nodes at the capture's current position; each body is a conditional_body builder
  // (begin_building() on it captures into the body; its graph_definition() view is valid before
  // and after that).
  graph_condition create_condition(std::optional<unsigned> default_value = std::nullopt) const;
  graph_builder if_then(const graph_condition& c);
  std::pair<graph_builder, graph_builder> if_else(const graph_condition& c);
  graph_builder while_loop(const graph_condition& c);
  std::vector<graph_builder> switch_(const graph_condition& c, unsigned count);

  // Embeds a clone of a finished builder's graph (or of a definition) at the capture's position.
  void embed(const graph_builder& child);
  void embed(const cucore::graph_definition& child);

  // A host callback at the capture's position, retained by the captured graph.
  template <class F>
  requires std::invocable < std::decay_t<F>
  & > &&(!std::is_convertible_v<F, host_function>)void callback(F&& fn) {
    using callable = std::decay_t<F>;
    auto owned = std::make_shared<callable>(std::forward<F>(fn));
    void* data = owned.get();
    callback_erased(&detail::invoke_host_callable<callable>, data, std::move(owned), nullptr);
  }
  void callback(host_function fn, std::span<const std::byte> user_data);
  void callback(host_function fn, void* user_data);

  // A view of the graph that shares its ownership (it survives close()). Refused on a closed or
  // forked builder, during capture, and on a primary builder before begin_building().
  cucore::graph_definition graph_definition() const;

  // Ends a capture in progress (a forked builder never does: its primary does), releases the
  // stream. Idempotent.
  void close() noexcept;

  struct impl;  // defined by the implementation

 private:
  friend struct detail::graph_access;
  explicit graph_builder(std::unique_ptr<impl> i) noexcept;
  void callback_erased(host_function fn, void* data, std::shared_ptr<const void> fn_owner,
                       std::shared_ptr<const void> data_owner);
  std::vector<graph_builder> conditional(const graph_condition& c, conditional_kind k,
                                         unsigned count);
  std::unique_ptr<impl> impl_;
};

// Ends a capture when the scope is left by an exception (or without end()), so a throwing capture
// never leaves the stream capturing:
//   graph_builder b(dev);
//   { capture_guard guard(b); launch(b.stream(), ...); guard.end(); }
class capture_guard {
 public:
  explicit capture_guard(graph_builder& b, capture_mode mode = capture_mode::relaxed)
      : builder_(&b) {
    b.begin_building(mode);
  }
  capture_guard(const capture_guard&) = delete;
  capture_guard& operator=(const capture_guard&) = delete;
  ~capture_guard();
  // Ends building normally (errors throw).
  void end() {
    graph_builder* b = std::exchange(builder_, nullptr);
    if (b != nullptr) b->end_building();
  }

 private:
  graph_builder* builder_;
};

}  // namespace cucore
