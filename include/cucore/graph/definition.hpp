// Explicit CUDA graph construction whose nodes keep what they reference alive.
//
// A graph_definition owns a CUgraph. Every node that references a resource (a kernel and its
// argument buffers, memcpy/memset operands, an event, a host callback and its data) bundles owners
// of those resources into an immutable attachment owned by a CUDA user object that the graph holds.
// CUDA copies that reference into clones, embeds and executable graphs, so the owners live exactly
// as long as some graph that can still run the node. See docs/graphs.md.
//
// Like the CUDA graph it wraps, a graph_definition (and every view of it and its nodes) needs
// external synchronization: do not mutate one graph from two threads at once.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "cucore/runtime/device.hpp"
#include "cucore/runtime/event.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"

struct CUgraph_st;      // the driver's graph (CUgraph), opaque here
struct CUgraphNode_st;  // the driver's graph node (CUgraphNode), opaque here

namespace cucore {

class graph;
class graph_builder;
class graph_definition;
class graph_node;

namespace detail {
struct graph_state;
struct graph_access;
}  // namespace detail

// What a node does (CUgraphNodeType).
enum class graph_node_kind {
  kernel,
  memcpy,
  memset,
  host_callback,
  child_graph,
  empty,
  event_wait,
  event_record,
  mem_alloc,
  mem_free,
  conditional,
  other,  // a kind cucore does not build (external semaphores, batch memory operations, ...)
};
const char* to_string(graph_node_kind kind) noexcept;

enum class conditional_kind { if_then, if_else, while_loop, switch_ };
const char* to_string(conditional_kind kind) noexcept;

// cuGraphInstantiateWithParams flags. upload_stream, when set, uploads the graph as part of the
// instantiation.
struct graph_instantiate_options {
  bool auto_free_on_launch = false;
  bool device_launch = false;
  bool use_node_priority = false;
  std::optional<stream_ref> upload_stream = std::nullopt;
};

// CU_GRAPH_DEBUG_DOT_FLAGS_*: what debug_dot_print writes beyond the topology.
struct graph_dot_options {
  bool verbose = false;
  bool runtime_types = false;
  bool kernel_node_params = false;
  bool memcpy_node_params = false;
  bool memset_node_params = false;
  bool host_node_params = false;
  bool event_node_params = false;
  bool kernel_node_attributes = false;
  bool handles = false;
  bool mem_alloc_node_params = false;
  bool mem_free_node_params = false;
  bool extra_topo_info = false;
  bool conditional_node_params = false;
};

// A condition variable of conditional nodes (CUgraphConditionalHandle), created by the graph whose
// conditional nodes read it. Pass it to a kernel as an argument (the kernel sees a
// cudaGraphConditionalHandle) and set it there with cudaGraphSetConditional.
class graph_condition {
 public:
  graph_condition() noexcept = default;
  unsigned long long handle() const noexcept { return handle_; }
  // The graph it belongs to; conditional nodes of other graphs refuse it.
  CUgraph_st* graph_handle() const noexcept { return graph_; }
  friend bool operator==(const graph_condition&, const graph_condition&) noexcept = default;

 private:
  friend struct detail::graph_access;
  graph_condition(unsigned long long h, CUgraph_st* g) noexcept : handle_(h), graph_(g) {}
  unsigned long long handle_ = 0;
  CUgraph_st* graph_ = nullptr;
};

// A memcpy or memset operand: where the bytes are, and who keeps them there.
//  - a buffer (optionally at an offset): its allocation is retained by the graph, so closing or
//    destroying the buffer afterwards is safe;
//  - a pinned_buffer: its host allocation is retained;
//  - a raw device address (or a host pointer through host()) with an optional explicit owner,
//    which the graph retains instead; without one, keeping the memory alive is the caller's job.
// A buffer together with an explicit owner is not a constructor: the buffer already says who owns
// it.
class memory_operand {
 public:
  memory_operand(const buffer& b, std::size_t offset = 0);  // NOLINT(google-explicit-constructor)
  memory_operand(const pinned_buffer& b, std::size_t offset = 0);  // NOLINT
  memory_operand(device_address address,                           // NOLINT
                 std::shared_ptr<const void> owner = {}) noexcept
      : address_(address), owner_(std::move(owner)) {}
  // Host memory that is not a pinned_buffer (pinned or pageable).
  static memory_operand host(const void* pointer, std::shared_ptr<const void> owner = {}) noexcept;

  device_address address() const noexcept { return address_; }
  bool is_host() const noexcept { return host_; }
  // The bytes available from address() when known (a buffer's size less the offset), else 0.
  std::size_t known_size() const noexcept { return known_size_; }
  const std::shared_ptr<const void>& owner() const noexcept { return owner_; }

 private:
  device_address address_ = 0;
  bool host_ = false;
  std::size_t known_size_ = 0;
  std::shared_ptr<const void> owner_;
};

// A C host function for callback nodes (CUhostFn).
using host_function = void (*)(void* user_data);

struct kernel_node_params {
  dim3 grid;
  dim3 block;
  std::size_t shared_memory_bytes = 0;
  void* function = nullptr;  // the CUfunction the driver resolved for the node
};
struct memcpy_node_params {
  device_address dst = 0;
  device_address src = 0;
  std::size_t bytes = 0;
};
struct memset_node_params {
  device_address dst = 0;
  std::uint32_t value = 0;
  unsigned element_size = 1;  // bytes: 1, 2 or 4
  std::size_t width = 0;      // elements per row
  std::size_t height = 1;     // rows
  std::size_t pitch = 0;      // bytes between rows
};
struct mem_alloc_node_params {
  device_address address = 0;
  std::size_t bytes = 0;
  int device = 0;
};

struct allocate_options {
  std::optional<cucore::device> device = std::nullopt;  // default: the graph's device
  std::vector<cucore::device> peer_access = {};         // devices that may also read and write it
};

namespace detail {

// Adds nodes to a graph with a fixed set of dependencies. graph_definition adds them at the
// graph's entry (no dependencies); graph_node adds them after itself. Each returns the new node.
template <class Derived>
class node_factory {
 public:
  // A kernel launch. The node keeps the kernel's library loaded and every buffer argument's
  // allocation alive.
  graph_node launch(const launch_config& config, const kernel& k,
                    const kernel_arguments& args) const;
  // The same, taking the arguments' owners over instead of copying them: `args` is left without
  // owners (a moved-from object: assign it before launching with it again).
  graph_node launch(const launch_config& config, const kernel& k, kernel_arguments&& args) const;
  template <class... Args>
  graph_node launch(const launch_config& config, const kernel& k, const Args&... args) const;

  // A kernel launch on `dev`, which may differ from the graph's device (a multi-device graph): the
  // driver resolves the kernel's function in `dev`'s primary context, and the node runs there
  // wherever the graph is launched. Owners as for launch().
  graph_node launch_on(const cucore::device& dev, const launch_config& config, const kernel& k,
                       const kernel_arguments& args) const;
  template <class... Args>
  graph_node launch_on(const cucore::device& dev, const launch_config& config, const kernel& k,
                       const Args&... args) const;

  // Copies `bytes` from src to dst (device, pinned or host memory).
  graph_node memcpy(const memory_operand& dst, const memory_operand& src, std::size_t bytes) const;

  // Fills `width` elements of a 1, 2 or 4 byte value (rows of them when height > 1, `pitch` bytes
  // apart).
  template <class T>
  graph_node memset(const memory_operand& dst, T value, std::size_t width, std::size_t height = 1,
                    std::size_t pitch = 0) const;
  // The same with the value's bits and its size given explicitly (1, 2 or 4 bytes).
  graph_node memset_bits(const memory_operand& dst, std::uint32_t bits, unsigned element_size,
                         std::size_t width, std::size_t height = 1, std::size_t pitch = 0) const;

  graph_node record(const event& e) const;  // keeps the event alive
  graph_node wait(const event& e) const;    // keeps the event alive

  // A host callback: any C++ callable taking no arguments. The graph keeps (a moved or copied
  // instance of) it alive. It runs on a CUDA thread: it must not call CUDA and must not throw (an
  // exception terminates the process after logging its message).
  template <class F>
  requires std::invocable < std::decay_t<F>
  & > &&(!std::is_convertible_v<F, host_function>)graph_node callback(F&& fn) const;
  // A C function with a copy of `user_data` that the graph keeps, aligned for any type (empty →
  // a null pointer).
  graph_node callback(host_function fn, std::span<const std::byte> user_data) const;
  // A C function with a pointer the caller keeps valid.
  graph_node callback(host_function fn, void* user_data) const;

  graph_node empty() const;
  // An empty node after the factory's dependencies and every node in `others`.
  graph_node join(std::initializer_list<graph_node> others) const;
  graph_node join(std::span<const graph_node> others) const;

  // Embeds a clone of `child` (CUDA clones it; the clone keeps its own owners).
  graph_node embed(const graph_definition& child) const;

  // Graph-owned memory: allocated when the graph reaches the node, freed by a free node (or by
  // graph_instantiate_options::auto_free_on_launch).
  graph_node allocate(std::size_t bytes, const allocate_options& options = {}) const;
  graph_node deallocate(device_address address) const;

  // Conditional nodes; their bodies are branches(): if_then 1, if_else 2 (then, else), while_loop
  // 1, switch_ `count`. Bodies may hold kernels, copies, memsets, empty, child and conditional
  // nodes (CUDA's rule).
  graph_node if_then(const graph_condition& c) const;
  graph_node if_else(const graph_condition& c) const;
  graph_node while_loop(const graph_condition& c) const;
  graph_node switch_(const graph_condition& c, unsigned count) const;

 protected:
  // `take`: the arguments to take the owners of (the rvalue overload), else null (copied).
  // `device`: the ordinal to run on, or -1 for the graph's device.
  graph_node launch_owned(const launch_config& config, const kernel& k,
                          const kernel_arguments& args, kernel_arguments* take,
                          int device = -1) const;
  graph_node callback_erased(host_function fn, void* data, std::shared_ptr<const void> fn_owner,
                             std::shared_ptr<const void> data_owner) const;
  graph_node conditional(const graph_condition& c, conditional_kind kind, unsigned count) const;
};

}  // namespace detail

// A node of a graph_definition: a value that names the node (copies name the same node). Once the
// node is destroyed (by any copy), every copy is invalid and using it is an error.
class graph_node : public detail::node_factory<graph_node> {
 public:
  graph_node() noexcept = default;

  bool valid() const noexcept;
  explicit operator bool() const noexcept { return valid(); }
  CUgraphNode_st* handle() const;
  graph_node_kind kind() const;
  // The graph the node belongs to (a view that shares ownership of it).
  graph_definition graph() const;

  // Edges. An edge between two graphs is an invalid_argument; a node to itself, a cuda_error.
  std::vector<graph_node> predecessors() const;
  std::vector<graph_node> successors() const;
  void add_predecessor(const graph_node& n) const;
  void remove_predecessor(const graph_node& n) const;
  void set_predecessors(std::span<const graph_node> nodes) const;  // replaces all incoming edges
  void add_successor(const graph_node& n) const;
  void remove_successor(const graph_node& n) const;
  void set_successors(std::span<const graph_node> nodes) const;  // replaces all outgoing edges

  // Parameters, read back from the driver; each throws invalid_argument for another kind.
  kernel_node_params kernel_params() const;
  memcpy_node_params memcpy_params() const;
  memset_node_params memset_params() const;
  mem_alloc_node_params alloc_params() const;
  device_address free_address() const;
  CUevent_st* event_handle() const;  // event_record and event_wait
  graph_definition child_graph() const;
  // Conditional nodes built by cucore (explicitly or through a graph_builder).
  conditional_kind conditional_type() const;
  graph_condition condition() const;
  std::vector<graph_definition> branches() const;
  graph_definition branch(std::size_t index) const;

  // Removes the node and its edges. Its owners are released from this graph; clones, embeds and
  // executable graphs keep theirs. Child and branch graph views of the node become invalid. If the
  // driver refuses, nothing changes.
  void destroy();

  friend bool operator==(const graph_node& a, const graph_node& b) noexcept {
    return a.graph_ == b.graph_ && a.node_ == b.node_ && a.serial_ == b.serial_;
  }
  std::size_t hash() const noexcept {
    return std::hash<const void*>()(node_) ^ (std::hash<std::uint64_t>()(serial_) << 1);
  }

 private:
  friend class detail::node_factory<graph_node>;
  friend struct detail::graph_access;
  graph_node(std::shared_ptr<detail::graph_state> g, CUgraphNode_st* node,
             std::uint64_t serial) noexcept
      : graph_(std::move(g)), node_(node), serial_(serial) {}
  std::span<const graph_node> factory_dependencies() const noexcept { return {this, 1}; }
  const std::shared_ptr<detail::graph_state>& factory_state() const;
  // The graph (a view sharing ownership of its hierarchy), the node, and the serial of the
  // graph's metadata entry that names it: once the node is destroyed the entry goes, and a node
  // CUDA later creates at the same handle gets another serial, so a stale graph_node never names
  // it.
  std::shared_ptr<detail::graph_state> graph_;
  CUgraphNode_st* node_ = nullptr;
  std::uint64_t serial_ = 0;
};

// A CUDA graph built explicitly. Copies are views of the same graph (they share ownership);
// clone() makes an independent copy.
class graph_definition : public detail::node_factory<graph_definition> {
 public:
  // An empty handle (no graph), like a default-constructed buffer or stream.
  graph_definition() noexcept = default;
  // A new graph without nodes, whose nodes run on `dev` (for example device::current()).
  explicit graph_definition(const cucore::device& dev);

  bool valid() const noexcept;
  explicit operator bool() const noexcept { return valid(); }
  CUgraph_st* handle() const;
  cucore::device device() const;

  // A condition for this graph's conditional nodes; with a default value, every launch starts
  // with the condition set to it.
  graph_condition create_condition(std::optional<unsigned> default_value = std::nullopt) const;

  std::vector<graph_node> nodes() const;
  std::vector<std::pair<graph_node, graph_node>> edges() const;  // (from, to)
  std::size_t node_count() const;

  // An independent copy (cuGraphClone): it holds its own references to every node's owners.
  graph_definition clone() const;

  cucore::graph instantiate(const graph_instantiate_options& options = {}) const;
  void debug_dot_print(const std::filesystem::path& path,
                       const graph_dot_options& options = {}) const;

  friend bool operator==(const graph_definition& a, const graph_definition& b) noexcept {
    return a.state_ == b.state_;
  }

 private:
  friend class detail::node_factory<graph_definition>;
  friend struct detail::graph_access;
  friend class graph_node;
  explicit graph_definition(std::shared_ptr<detail::graph_state> s) noexcept
      : state_(std::move(s)) {}
  std::span<const graph_node> factory_dependencies() const noexcept { return {}; }
  const std::shared_ptr<detail::graph_state>& factory_state() const;
  std::shared_ptr<detail::graph_state> state_;
};

// Implementation of the templates above.
namespace detail {

template <class Derived>
template <class... Args>
graph_node node_factory<Derived>::launch(const launch_config& config, const kernel& k,
                                         const Args&... args) const {
  if constexpr (sizeof...(Args) == 0) {
    return launch(config, k, kernel_arguments());
  } else {
    return launch(config, k, kernel_arguments(args...));
  }
}

template <class Derived>
template <class... Args>
graph_node node_factory<Derived>::launch_on(const cucore::device& dev, const launch_config& config,
                                            const kernel& k, const Args&... args) const {
  if constexpr (sizeof...(Args) == 0) {
    return launch_on(dev, config, k, kernel_arguments());
  } else {
    return launch_on(dev, config, k, kernel_arguments(args...));
  }
}

// Calls call(callable); an exception is logged with its message and terminates the process (it
// cannot reach the caller: CUDA runs callbacks on its own thread).
void invoke_host_callable_guarded(void* callable, void (*call)(void*)) noexcept;

template <class Derived>
template <class T>
graph_node node_factory<Derived>::memset(const memory_operand& dst, T value, std::size_t width,
                                         std::size_t height, std::size_t pitch) const {
  static_assert(
      std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4),
      "memset takes a trivially copyable value of 1, 2 or 4 bytes");
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return memset_bits(dst, bits, sizeof(T), width, height, pitch);
}

template <class F>
void invoke_host_callable(void* callable) noexcept {
  invoke_host_callable_guarded(callable, [](void* c) { (*static_cast<F*>(c))(); });
}

template <class Derived>
template <class F>
requires std::invocable < std::decay_t<F>
& > &&(!std::is_convertible_v<F, host_function>)
        graph_node node_factory<Derived>::callback(F&& fn) const {
  using callable = std::decay_t<F>;
  auto owned = std::make_shared<callable>(std::forward<F>(fn));
  void* data = owned.get();
  return callback_erased(&invoke_host_callable<callable>, data, std::move(owned), nullptr);
}

}  // namespace detail
}  // namespace cucore

template <>
struct std::hash<cucore::graph_node> {
  std::size_t operator()(const cucore::graph_node& n) const noexcept { return n.hash(); }
};
