#include "cucore/runtime/launch.hpp"

#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cucore/error.hpp"
#include "runtime/runtime.hpp"

namespace cucore {
namespace {

constexpr std::string_view kFeature = "launching kernels";
constexpr std::size_t kMaxAlignment = alignof(std::max_align_t);

std::string to_string(const dim3& d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

void check_extent(const dim3& d, const char* what) {
  if (d.x == 0 || d.y == 0 || d.z == 0) {
    throw invalid_argument(std::string("launch_config::") + what + " " + to_string(d) +
                           " has a zero extent: every extent must be at least 1");
  }
}

}  // namespace

void detail::check_launch_config(const launch_config& c) {
  check_extent(c.grid, "grid");
  check_extent(c.block, "block");
  if (c.cluster) {
    check_extent(*c.cluster, "cluster");
    if (c.grid.x % c.cluster->x != 0 || c.grid.y % c.cluster->y != 0 ||
        c.grid.z % c.cluster->z != 0) {
      throw invalid_argument("launch_config::grid " + to_string(c.grid) +
                             " is not a multiple of launch_config::cluster " +
                             to_string(*c.cluster));
    }
  }
  if (c.shared_memory_bytes > 0xffffffffu) {
    throw invalid_argument("launch_config::shared_memory_bytes " +
                           std::to_string(c.shared_memory_bytes) + " is out of range");
  }
}

void detail::check_launch_arguments(const kernel& k, const kernel_arguments& args) {
  const std::vector<kernel_parameter>* params = nullptr;
  try {
    params = &k.parameters();
  } catch (const cuda_error&) {
    return;  // the driver cannot tell: nothing to check against
  }
  if (params->size() != args.count()) {
    throw invalid_argument("kernel \"" + k.name() + "\" takes " + std::to_string(params->size()) +
                           " parameter(s) but the launch passed " + std::to_string(args.count()) +
                           " argument(s)");
  }
  for (std::size_t i = 0; i < params->size(); ++i) {
    if ((*params)[i].size != args.size_of(i)) {
      throw invalid_argument("argument " + std::to_string(i) + " of the launch of kernel \"" +
                             k.name() + "\" is " + std::to_string(args.size_of(i)) +
                             " bytes but the kernel's parameter " + std::to_string(i) + " is " +
                             std::to_string((*params)[i].size) + " bytes");
    }
  }
}

void kernel_arguments::push(const buffer& b) {
  device_address address = b.address();
  push_owner(b.owner());
  push_bytes(&address, sizeof(address), alignof(device_address));
}

void kernel_arguments::push_owner(std::shared_ptr<const void> owner) {
  if (owner_count_ < inline_owners_.size()) {
    inline_owners_[owner_count_] = std::move(owner);
  } else {
    if (owner_count_ == inline_owners_.size()) {
      heap_owners_.assign(inline_owners_.begin(), inline_owners_.end());
    }
    heap_owners_.push_back(std::move(owner));
  }
  ++owner_count_;
}

std::size_t kernel_arguments::size_of(std::size_t index) const {
  if (index >= slot_count_) {
    throw std::out_of_range("kernel_arguments::size_of: argument " + std::to_string(index) +
                            " of " + std::to_string(slot_count_));
  }
  return slots()[index].size;
}

void kernel_arguments::push_bytes(const void* data, std::size_t size, std::size_t alignment) {
  if (alignment > kMaxAlignment) alignment = kMaxAlignment;
  const std::size_t offset = (used_bytes_ + alignment - 1) / alignment * alignment;
  const std::size_t end = offset + size;
  if (heap_bytes_.empty() && end > sizeof(inline_bytes_)) {
    heap_bytes_.assign(inline_bytes_, inline_bytes_ + used_bytes_);
  }
  if (!heap_bytes_.empty() || end > sizeof(inline_bytes_)) heap_bytes_.resize(end);
  if (size != 0) std::memcpy(bytes() + offset, data, size);
  used_bytes_ = end;
  if (heap_slots_.empty() && slot_count_ == inline_slots_.size()) {
    heap_slots_.assign(inline_slots_.begin(), inline_slots_.end());
  }
  if (heap_slots_.empty()) {
    inline_slots_[slot_count_] = {offset, size};
  } else {
    heap_slots_.push_back({offset, size});
  }
  ++slot_count_;
}

std::vector<void*> kernel_arguments::pointers() const {
  std::vector<void*> out(slot_count_);
  pointers(out.data());
  return out;
}

void kernel_arguments::pointers(void** out) const noexcept {
  auto* base = const_cast<std::byte*>(bytes());
  const slot* all = slots();
  for (std::size_t i = 0; i < slot_count_; ++i) out[i] = base + all[i].offset;
}

void launch(stream_ref s, const launch_config& config, const kernel& k,
            const kernel_arguments& args) {
  CUkernel handle = k.handle();  // throws for an empty kernel
  detail::check_launch_config(config);
  const auto& api = detail::runtime_driver(kFeature);
  detail::scoped_context scope(api, s.device().ordinal());
  detail::check_launch_arguments(k, args);

  CUlaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if (config.cluster) {
    CUlaunchAttribute& a = attributes[count++];
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = config.cluster->x;
    a.value.clusterDim.y = config.cluster->y;
    a.value.clusterDim.z = config.cluster->z;
  }
  if (config.cooperative) {
    CUlaunchAttribute& a = attributes[count++];
    a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    a.value.cooperative = 1;
  }
  CUlaunchConfig c{};
  detail::set_launch_extents(c, config);
  c.hStream = s.handle();
  c.attrs = count != 0 ? attributes : nullptr;
  c.numAttrs = count;
  detail::argument_pointers pointers(args);
  // A CUkernel launches as a CUfunction: the driver picks its function in the current context.
  detail::check_driver(
      api.cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(handle), pointers.data(), nullptr),
      "cuLaunchKernelEx");
}

}  // namespace cucore
