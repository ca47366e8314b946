// The node factory (node_factory: graph_definition's and graph_node's add_* members) and the
// operands of its copies (memory_operand). Every add follows one order: validate and prepare
// everything that can fail (the attachment's user object, already retained by the graph; the
// metadata entries, with room reserved), then the one CUDA mutation, then a commit that cannot
// fail. A failed mutation releases the prepared reference, so the owners are dropped and nothing
// leaks.
#include <algorithm>
#include <array>
#include <string>

#include "cucore/error.hpp"
#include "graph/graph_state.hpp"
#include "runtime/runtime.hpp"

namespace cucore {
namespace detail {
namespace {

// The dependencies' handles, deduplicated; stored inline for the common few.
class dependency_list {
 public:
  dependency_list(const graph_state& s, std::span<const graph_node> deps) {
    if (deps.size() > inline_.size()) heap_.reserve(deps.size());
    for (const graph_node& n : deps) {
      if (!names_live_node(n)) {
        throw invalid_argument("a dependency is an empty or destroyed graph_node");
      }
      const CUgraphNode handle = graph_access::handle_of(n);
      if (graph_access::graph_of(n).get() != &s) {
        throw invalid_argument(
            "a dependency belongs to another graph: nodes can only depend on nodes of the same "
            "graph (embed the other graph as a child instead)");
      }
      if (std::find(data(), data() + size_, handle) != data() + size_) continue;
      if (deps.size() > inline_.size()) {
        heap_.push_back(handle);
      } else {
        inline_[size_] = handle;
      }
      ++size_;
    }
  }
  const CUgraphNode* data() const noexcept {
    return size_ == 0 ? nullptr : heap_.empty() ? inline_.data() : heap_.data();
  }
  CUgraphNode* data() noexcept { return heap_.empty() ? inline_.data() : heap_.data(); }
  std::size_t size() const noexcept { return size_; }

 private:
  std::array<CUgraphNode, 4> inline_{};
  std::vector<CUgraphNode> heap_;
  std::size_t size_ = 0;
};

// Runs `add(api, graph, deps, count, &node)` between prepare and commit. `prepare(api, top)`
// returns the node's prepared attachment (held by `top`, the top graph). `meta` is published for
// the node; `finish(node, meta)` completes it before publication and must not throw.
template <class Prepare, class Add, class Finish>
graph_node add_prepared_node(const std::shared_ptr<graph_state>& s,
                             std::span<const graph_node> deps, Prepare&& prepare, const char* call,
                             node_meta meta, Add&& add, Finish&& finish) {
  check_usable(*s);
  const driver_api& api = graph_driver();
  scoped_context scope(api, s->device);
  const dependency_list d(*s, deps);

  // Fallible work first: room in the metadata table and memory for the entry, and the
  // attachment.
  meta.serial = ++s->last_serial;
  const std::uint64_t serial = meta.serial;
  s->meta.reserve_one();
  prepared_attachment prepared = prepare(api, attachment_holder_state(*s));

  CUgraphNode node = nullptr;
  check_driver(add(api, s->graph, d.data(), d.size(), &node), call);

  // Commit: nothing below fails (the entry's memory and the map's room were reserved above, and
  // node_meta moves without allocating).
  finish(node, meta);
  prepared.commit(meta);
  s->meta.emplace(node, std::move(meta));
  return graph_access::node(s, node, serial);
}

template <class Add, class Finish>
graph_node add_node(const std::shared_ptr<graph_state>& s, std::span<const graph_node> deps,
                    owner_list owners, const char* call, node_meta meta, Add&& add,
                    Finish&& finish) {
  return add_prepared_node(
      s, deps,
      [&owners](const driver_api& api, graph_state& top) {
        return prepared_attachment(api, top, std::move(owners));
      },
      call, std::move(meta), std::forward<Add>(add), std::forward<Finish>(finish));
}

template <class Add>
graph_node add_node(const std::shared_ptr<graph_state>& s, std::span<const graph_node> deps,
                    owner_list owners, const char* call, Add&& add) {
  return add_node(s, deps, std::move(owners), call, node_meta{}, std::forward<Add>(add),
                  [](CUgraphNode, node_meta&) noexcept {});
}

void fill_side(const memory_operand& op, CUmemorytype& type, CUdeviceptr& device,
               const void*& host) {
  if (op.is_host()) {
    type = CU_MEMORYTYPE_HOST;
    host = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(op.address()));
  } else {
    // Device memory and pinned host memory: the driver resolves the unified address.
    type = CU_MEMORYTYPE_UNIFIED;
    device = op.address();
  }
}

void check_operand(const memory_operand& op, std::size_t bytes, const char* side) {
  if (op.address() == 0) {
    throw invalid_argument(std::string("the ") + side + " operand is a null address");
  }
  if (op.known_size() != 0 && bytes > op.known_size()) {
    throw invalid_argument(std::string("the ") + side + " operand holds " +
                           std::to_string(op.known_size()) + " bytes from its offset but " +
                           std::to_string(bytes) + " were asked for");
  }
}

// The device whose memory `op` is, or -1 for host memory and addresses the driver cannot place.
int device_of(const driver_api& api, const memory_operand& op) noexcept {
  if (op.is_host()) return -1;
  int ordinal = -1;
  if (api.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, op.address()) !=
      CUDA_SUCCESS) {
    return -1;
  }
  return ordinal;
}

// Adds a memcpy node. The driver runs a copy in one context and accepts it only where that
// context's device can reach both operands (measured, driver 580: pool memory of another device
// is refused with CUDA_ERROR_INVALID_VALUE unless the pool grants that device access). The graph's
// device is tried first (what one device needs); when it cannot reach an operand, the devices
// owning the operands are tried, so a copy between two devices works whenever either of them can
// reach both.
CUresult add_memcpy_node(const driver_api& api, CUgraph g, const CUgraphNode* deps,
                         std::size_t count, const CUDA_MEMCPY3D& copy, const memory_operand& dst,
                         const memory_operand& src, int graph_device, CUgraphNode* out) {
  CUresult r = api.cuGraphAddMemcpyNode(out, g, deps, count, &copy, primary_context(graph_device));
  if (r != CUDA_ERROR_INVALID_VALUE) return r;
  const int dst_device = device_of(api, dst);
  const int src_device = device_of(api, src);
  const auto try_on = [&](int d) {
    return api.cuGraphAddMemcpyNode(out, g, deps, count, &copy, primary_context(d));
  };
  if (dst_device >= 0 && dst_device != graph_device) {
    r = try_on(dst_device);
    if (r != CUDA_ERROR_INVALID_VALUE) return r;
  }
  if (src_device >= 0 && src_device != graph_device && src_device != dst_device) {
    r = try_on(src_device);
    if (r != CUDA_ERROR_INVALID_VALUE) return r;
  }
  if ((dst_device >= 0 && dst_device != graph_device) ||
      (src_device >= 0 && src_device != graph_device)) {
    const auto where = [](int d) {
      return d < 0 ? std::string("host or unplaced memory") : "device " + std::to_string(d);
    };
    throw invalid_argument(
        "memcpy node from " + where(src_device) + " to " + where(dst_device) +
        " refused: no device involved can reach both operands. A graph's copy runs on one "
        "device, which must be able to read the source and write the destination; pool memory "
        "is reachable from another device only once its pool grants access "
        "(pool_memory_resource::set_access(peer), or allocate_options::peer_access for a graph "
        "allocation). Grant one of the devices access to the other's operand, or copy through "
        "pinned host memory");
  }
  return r;
}

// The CUfunction of a kernel in the primary context of `device`. Graphs add many nodes of one
// kernel, so the last answer is kept per thread, tied to the kernel's loaded state: a weak
// reference to it, so a library unloaded (and its handle reused) never matches. Only a miss asks
// the driver (in the device's context).
template <class Owner>
CUfunction function_of(const driver_api& api, CUkernel handle, const Owner& kernel_owner,
                       int device) {
  struct last_function {
    std::weak_ptr<const void> owner;
    CUkernel handle = nullptr;
    int device = -1;
    CUfunction function = nullptr;
  };
  thread_local last_function last;
  const bool same_owner = !last.owner.expired() && !last.owner.owner_before(kernel_owner) &&
                          !kernel_owner.owner_before(last.owner);
  if (same_owner && last.handle == handle && last.device == device) return last.function;
  scoped_context scope(api, device);
  CUfunction function = nullptr;
  check_driver(api.cuKernelGetFunction(&function, handle), "cuKernelGetFunction");
  last = {kernel_owner, handle, device, function};
  return function;
}

// An event record or wait node of `e`, added by the driver's `call` (the member `add` of its
// table) after `deps`.
template <class Add>
graph_node add_event_node(const std::shared_ptr<graph_state>& s, std::span<const graph_node> deps,
                          const event& e, const char* call, Add add) {
  CUevent handle = e.handle();
  return add_node(s, deps, {e.owner()}, call,
                  [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n,
                      CUgraphNode* out) { return (a.*add)(out, g, d, n, handle); });
}

}  // namespace

// ---- node_factory ------------------------------------------------------------------------------

template <class D>
graph_node node_factory<D>::launch(const launch_config& config, const kernel& k,
                                   const kernel_arguments& args) const {
  return launch_owned(config, k, args, nullptr);
}

template <class D>
graph_node node_factory<D>::launch(const launch_config& config, const kernel& k,
                                   kernel_arguments&& args) const {
  return launch_owned(config, k, args, &args);
}

template <class D>
graph_node node_factory<D>::launch_on(const cucore::device& dev, const launch_config& config,
                                      const kernel& k, const kernel_arguments& args) const {
  return launch_owned(config, k, args, nullptr, dev.ordinal());
}

template <class D>
graph_node node_factory<D>::launch_owned(const launch_config& config, const kernel& k,
                                         const kernel_arguments& args, kernel_arguments* take,
                                         int device) const {
  const D& self = static_cast<const D&>(*this);
  const auto& s = self.factory_state();
  CUkernel handle = k.handle();  // throws for an empty kernel
  check_launch_config(config);
  check_launch_arguments(k, args);
  check_usable(*s);
  const auto& kernel_owner = kernel_access::owner(k);  // not null: handle() checked
  // The kernel's function in the context of the device it runs on (a CUkernel in `func` is
  // refused inside conditional bodies); a CUfunction of another device's context makes the node
  // run on that device.
  const CUfunction function =
      function_of(graph_driver(), handle, kernel_owner, device < 0 ? s->device : device);
  // A node with the owners of a recent attachment shares it, and copies none of them; else the
  // owners are copied (or taken over from rvalue arguments) into a new one.
  const auto prepare = [&](const driver_api& api, graph_state& top) {
    prepared_attachment shared = prepared_attachment::share(api, top, kernel_owner, args.owners());
    if (shared.shared()) return shared;
    owner_list owners;
    owners.push(kernel_owner);
    if (take != nullptr) {
      for (auto& o : take->movable_owners()) owners.push(std::move(o));
    } else {
      for (const auto& o : args.owners()) owners.push(o);
    }
    return prepared_attachment::unshared(api, top, std::move(owners));
  };
  argument_pointers pointers(args);
  CUDA_KERNEL_NODE_PARAMS p{};
  set_launch_extents(p, config);
  p.kernelParams = pointers.data();
  p.func = function;
  return add_prepared_node(
      s, self.factory_dependencies(), prepare, "cuGraphAddKernelNode", node_meta{},
      [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n, CUgraphNode* out) {
        CUresult r = a.cuGraphAddKernelNode(out, g, d, n, &p);
        if (r != CUDA_SUCCESS) return r;
        CUkernelNodeAttrValue v{};
        if (config.cluster) {
          v.clusterDim.x = config.cluster->x;
          v.clusterDim.y = config.cluster->y;
          v.clusterDim.z = config.cluster->z;
          r = a.cuGraphKernelNodeSetAttribute(*out, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v);
        }
        if (r == CUDA_SUCCESS && config.cooperative) {
          v = {};
          v.cooperative = 1;
          r = a.cuGraphKernelNodeSetAttribute(*out, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v);
        }
        if (r != CUDA_SUCCESS) {
          a.cuGraphDestroyNode(*out);
          check_driver(r, "cuGraphKernelNodeSetAttribute");
        }
        return r;
      },
      [](CUgraphNode, node_meta&) noexcept {});
}

template <class D>
graph_node node_factory<D>::memcpy(const memory_operand& dst, const memory_operand& src,
                                   std::size_t bytes) const {
  const D& self = static_cast<const D&>(*this);
  const auto& s = self.factory_state();
  if (bytes == 0) {
    throw invalid_argument("memcpy of 0 bytes: a node that does nothing is empty()");
  }
  check_operand(dst, bytes, "destination");
  check_operand(src, bytes, "source");
  CUDA_MEMCPY3D c{};
  const void* dst_host = nullptr;
  fill_side(dst, c.dstMemoryType, c.dstDevice, dst_host);
  c.dstHost = const_cast<void*>(dst_host);
  fill_side(src, c.srcMemoryType, c.srcDevice, c.srcHost);
  c.WidthInBytes = bytes;
  c.Height = 1;
  c.Depth = 1;
  const int graph_device = s->device;
  return add_node(
      s, self.factory_dependencies(), {dst.owner(), src.owner()}, "cuGraphAddMemcpyNode",
      [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n, CUgraphNode* out) {
        return add_memcpy_node(a, g, d, n, c, dst, src, graph_device, out);
      });
}

template <class D>
graph_node node_factory<D>::memset_bits(const memory_operand& dst, std::uint32_t bits,
                                        unsigned element_size, std::size_t width,
                                        std::size_t height, std::size_t pitch) const {
  const D& self = static_cast<const D&>(*this);
  const auto& s = self.factory_state();
  if (element_size != 1 && element_size != 2 && element_size != 4) {
    throw invalid_argument("memset element size " + std::to_string(element_size) +
                           " is not 1, 2 or 4 bytes");
  }
  if (element_size < 4 && (bits >> (8 * element_size)) != 0) {
    throw invalid_argument("memset value " + std::to_string(bits) + " does not fit in " +
                           std::to_string(element_size) + " byte(s)");
  }
  if (width == 0 || height == 0) {
    throw invalid_argument("memset of width " + std::to_string(width) + " and height " +
                           std::to_string(height) + ": both must be at least 1");
  }
  if (dst.is_host()) {
    throw invalid_argument("memset writes device memory: the destination is a host pointer");
  }
  const std::size_t row = width * element_size;
  if (height > 1 && pitch < row) {
    throw invalid_argument("memset pitch " + std::to_string(pitch) + " is smaller than a row (" +
                           std::to_string(row) + " bytes)");
  }
  check_operand(dst, height > 1 ? (height - 1) * pitch + row : row, "destination");
  CUDA_MEMSET_NODE_PARAMS p{};
  p.dst = dst.address();
  p.pitch = height > 1 ? pitch : row;
  p.value = bits;
  p.elementSize = element_size;
  p.width = width;
  p.height = height;
  CUcontext ctx = primary_context(s->device);
  return add_node(s, self.factory_dependencies(), {dst.owner()}, "cuGraphAddMemsetNode",
                  [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n,
                      CUgraphNode* out) { return a.cuGraphAddMemsetNode(out, g, d, n, &p, ctx); });
}

template <class D>
graph_node node_factory<D>::record(const event& e) const {
  const D& self = static_cast<const D&>(*this);
  return add_event_node(self.factory_state(), self.factory_dependencies(), e,
                        "cuGraphAddEventRecordNode", &driver_api::cuGraphAddEventRecordNode);
}

template <class D>
graph_node node_factory<D>::wait(const event& e) const {
  const D& self = static_cast<const D&>(*this);
  return add_event_node(self.factory_state(), self.factory_dependencies(), e,
                        "cuGraphAddEventWaitNode", &driver_api::cuGraphAddEventWaitNode);
}

template <class D>
graph_node node_factory<D>::callback_erased(host_function fn, void* data,
                                            std::shared_ptr<const void> fn_owner,
                                            std::shared_ptr<const void> data_owner) const {
  const D& self = static_cast<const D&>(*this);
  if (fn == nullptr) throw invalid_argument("the host callback is a null function pointer");
  CUDA_HOST_NODE_PARAMS p{};
  p.fn = fn;
  p.userData = data;
  return add_node(self.factory_state(), self.factory_dependencies(),
                  {std::move(fn_owner), std::move(data_owner)}, "cuGraphAddHostNode",
                  [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n,
                      CUgraphNode* out) { return a.cuGraphAddHostNode(out, g, d, n, &p); });
}

template <class D>
graph_node node_factory<D>::callback(host_function fn, std::span<const std::byte> user_data) const {
  if (user_data.empty()) return callback_erased(fn, nullptr, nullptr, nullptr);
  std::shared_ptr<void> copy = detail::copy_user_data(user_data);
  void* data = copy.get();
  return callback_erased(fn, data, nullptr, std::move(copy));
}

template <class D>
graph_node node_factory<D>::callback(host_function fn, void* user_data) const {
  return callback_erased(fn, user_data, nullptr, nullptr);
}

template <class D>
graph_node node_factory<D>::empty() const {
  return join(std::span<const graph_node>{});
}

template <class D>
graph_node node_factory<D>::join(std::initializer_list<graph_node> others) const {
  return join(std::span<const graph_node>(others.begin(), others.size()));
}

template <class D>
graph_node node_factory<D>::join(std::span<const graph_node> others) const {
  const D& self = static_cast<const D&>(*this);
  std::vector<graph_node> deps(self.factory_dependencies().begin(),
                               self.factory_dependencies().end());
  deps.insert(deps.end(), others.begin(), others.end());
  return add_node(self.factory_state(), deps, {}, "cuGraphAddEmptyNode",
                  [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n,
                      CUgraphNode* out) { return a.cuGraphAddEmptyNode(out, g, d, n); });
}

template <class D>
graph_node node_factory<D>::embed(const graph_definition& child) const {
  const D& self = static_cast<const D&>(*this);
  const auto& s = self.factory_state();
  const auto& source = graph_access::state(child);
  if (!source) throw invalid_argument("embed: the child graph_definition is empty");
  // Usable first: a destroyed view's handle may since belong to another graph.
  check_usable(*source);
  if (source->graph == s->graph) throw invalid_argument("embed: a graph cannot embed itself");
  // A view is embedded through a whole copy of it (whole_copy_of_view), which holds its owners.
  const auto whole = whole_copy_of_view(graph_driver(), *source);
  const graph_state& from = whole ? *whole : *source;
  node_meta meta;
  auto body = make_body(*s);
  graph_state* body_ptr = body.get();
  meta.bodies.push_back(std::move(body));
  return add_node(
      s, self.factory_dependencies(), {}, "cuGraphAddChildGraphNode", std::move(meta),
      [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n, CUgraphNode* out) {
        CUresult r = a.cuGraphAddChildGraphNode(out, g, d, n, from.graph);
        if (r != CUDA_SUCCESS) {
          check_driver(r, "cuGraphAddChildGraphNode", conditional_graph_rule(a, from, r, true));
        }
        // The embedded clone's metadata, so destroy() inside it releases its references.
        try {
          r = a.cuGraphChildGraphNodeGetGraph(*out, &body_ptr->graph);
          if (r == CUDA_SUCCESS) import_clone_metadata(a, *body_ptr, from);
        } catch (...) {
          a.cuGraphDestroyNode(*out);
          throw;
        }
        if (r != CUDA_SUCCESS) a.cuGraphDestroyNode(*out);
        return r;
      },
      [&](CUgraphNode node, node_meta&) noexcept { body_ptr->owner_node = node; });
}

template <class D>
graph_node node_factory<D>::allocate(std::size_t bytes, const allocate_options& options) const {
  const D& self = static_cast<const D&>(*this);
  const auto& s = self.factory_state();
  if (bytes == 0) throw invalid_argument("allocate: 0 bytes requested; ask for at least 1");
  const int dev = options.device ? options.device->ordinal() : s->device;
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = device_at(dev).handle;
  std::vector<CUmemAccessDesc> access;
  for (const cucore::device& peer : options.peer_access) {
    // The driver answers a peer without a path with a bare CUDA_ERROR_INVALID_VALUE: say which.
    if (peer.ordinal() != dev && !peer.can_access_peer(cucore::device(dev))) {
      throw invalid_argument("allocate: peer_access lists device " +
                             std::to_string(peer.ordinal()) + ", which cannot access device " +
                             std::to_string(dev) +
                             "'s memory (device::can_access_peer is false); copy to it instead");
    }
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = device_at(peer.ordinal()).handle;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(a);
  }
  p.accessDescs = access.empty() ? nullptr : access.data();
  p.accessDescCount = access.size();
  p.bytesize = bytes;
  return add_node(s, self.factory_dependencies(), {}, "cuGraphAddMemAllocNode",
                  [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n,
                      CUgraphNode* out) { return a.cuGraphAddMemAllocNode(out, g, d, n, &p); });
}

template <class D>
graph_node node_factory<D>::deallocate(device_address address) const {
  const D& self = static_cast<const D&>(*this);
  if (address == 0) throw invalid_argument("deallocate: the address is null");
  return add_node(self.factory_state(), self.factory_dependencies(), {}, "cuGraphAddMemFreeNode",
                  [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n,
                      CUgraphNode* out) { return a.cuGraphAddMemFreeNode(out, g, d, n, address); });
}

template <class D>
graph_node node_factory<D>::conditional(const graph_condition& c, conditional_kind kind,
                                        unsigned count) const {
  const D& self = static_cast<const D&>(*this);
  const auto& s = self.factory_state();
  check_usable(*s);
  std::vector<CUgraph> bodies(kind == conditional_kind::switch_   ? count
                              : kind == conditional_kind::if_else ? 2
                                                                  : 1);
  CUgraphNodeParams p = conditional_params(*s, c, kind, count, bodies.data());
  node_meta meta;
  meta.conditional = kind;
  meta.condition = c;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    meta.bodies.push_back(make_body(*s));
  }
  return add_node(
      s, self.factory_dependencies(), {}, "cuGraphAddNode", std::move(meta),
      [&](const driver_api& a, CUgraph g, const CUgraphNode* d, std::size_t n, CUgraphNode* out) {
        return a.cuGraphAddNode(out, g, d, nullptr, n, &p);
      },
      [&](CUgraphNode node, node_meta& m) noexcept {
        for (std::size_t i = 0; i < m.bodies.size(); ++i) {
          m.bodies[i]->graph = p.conditional.phGraph_out[i];
          m.bodies[i]->owner_node = node;
        }
      });
}

template <class D>
graph_node node_factory<D>::if_then(const graph_condition& c) const {
  return conditional(c, conditional_kind::if_then, 1);
}
template <class D>
graph_node node_factory<D>::if_else(const graph_condition& c) const {
  return conditional(c, conditional_kind::if_else, 2);
}
template <class D>
graph_node node_factory<D>::while_loop(const graph_condition& c) const {
  return conditional(c, conditional_kind::while_loop, 1);
}
template <class D>
graph_node node_factory<D>::switch_(const graph_condition& c, unsigned count) const {
  return conditional(c, conditional_kind::switch_, count);
}

template class node_factory<graph_node>;
template class node_factory<graph_definition>;

}  // namespace detail

// ---- memory_operand ----------------------------------------------------------------------------

memory_operand::memory_operand(const buffer& b, std::size_t offset) {
  if (!b.valid()) {
    throw invalid_argument(
        "the buffer operand is closed or empty: it has no allocation to copy to or from");
  }
  if (offset > b.size()) {
    throw invalid_argument("offset " + std::to_string(offset) + " is past the end of a buffer of " +
                           std::to_string(b.size()) + " bytes");
  }
  address_ = b.address() + offset;
  known_size_ = b.size() - offset;
  owner_ = b.owner();
}

memory_operand::memory_operand(const pinned_buffer& b, std::size_t offset) {
  if (!b.valid()) throw invalid_argument("the pinned_buffer operand is closed or empty");
  if (offset > b.size()) {
    throw invalid_argument("offset " + std::to_string(offset) +
                           " is past the end of a pinned_buffer of " + std::to_string(b.size()) +
                           " bytes");
  }
  address_ = static_cast<device_address>(reinterpret_cast<std::uintptr_t>(b.data())) + offset;
  known_size_ = b.size() - offset;
  owner_ = b.owner();
}

memory_operand memory_operand::host(const void* pointer,
                                    std::shared_ptr<const void> owner) noexcept {
  memory_operand op(static_cast<device_address>(reinterpret_cast<std::uintptr_t>(pointer)),
                    std::move(owner));
  op.host_ = true;
  return op;
}

}  // namespace cucore
