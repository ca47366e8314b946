// RAII owners for the compiler libraries' handles, and the helpers that read their logs.
#pragma once

#include <string>
#include <vector>

#include "loader/libraries.hpp"

namespace cucore::detail {

// A NUL-terminated argv view of `flags`; `flags` must outlive it.
inline std::vector<const char*> c_strings(const std::vector<std::string>& flags) {
  std::vector<const char*> out;
  out.reserve(flags.size());
  for (const auto& f : flags) out.push_back(f.c_str());
  return out;
}

// Strips the terminating NULs the C APIs count in their log sizes.
inline std::string trim_nul(std::string s) {
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

class nvrtc_program {
 public:
  nvrtc_program(const nvrtc_api& api, nvrtcProgram handle) : api_(api), handle_(handle) {}
  nvrtc_program(const nvrtc_program&) = delete;
  nvrtc_program& operator=(const nvrtc_program&) = delete;
  ~nvrtc_program() { api_.nvrtcDestroyProgram(&handle_); }
  nvrtcProgram get() const noexcept { return handle_; }

 private:
  const nvrtc_api& api_;
  nvrtcProgram handle_;
};

class nvvm_program {
 public:
  nvvm_program(const nvvm_api& api, nvvmProgram handle) : api_(api), handle_(handle) {}
  nvvm_program(const nvvm_program&) = delete;
  nvvm_program& operator=(const nvvm_program&) = delete;
  ~nvvm_program() { api_.nvvmDestroyProgram(&handle_); }
  nvvmProgram get() const noexcept { return handle_; }

 private:
  const nvvm_api& api_;
  nvvmProgram handle_;
};

class nvjitlink_handle {
 public:
  nvjitlink_handle(const nvjitlink_api& api, nvJitLinkHandle handle) : api_(api), handle_(handle) {}
  nvjitlink_handle(const nvjitlink_handle&) = delete;
  nvjitlink_handle& operator=(const nvjitlink_handle&) = delete;
  ~nvjitlink_handle() { api_.nvJitLinkDestroy(&handle_); }
  nvJitLinkHandle get() const noexcept { return handle_; }

 private:
  const nvjitlink_api& api_;
  nvJitLinkHandle handle_;
};

}  // namespace cucore::detail
