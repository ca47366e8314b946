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

// Owns one compiler handle and destroys it through its library's table: `Destroy` is the table's
// function-pointer member (e.g. &nvrtc_api::nvrtcDestroyProgram).
template <class Api, class Handle, auto Destroy>
class compiler_handle {
 public:
  compiler_handle(const Api& api, Handle handle) : api_(api), handle_(handle) {}
  compiler_handle(const compiler_handle&) = delete;
  compiler_handle& operator=(const compiler_handle&) = delete;
  ~compiler_handle() { (api_.*Destroy)(&handle_); }
  Handle get() const noexcept { return handle_; }

 private:
  const Api& api_;
  Handle handle_;
};

using nvrtc_program = compiler_handle<nvrtc_api, nvrtcProgram, &nvrtc_api::nvrtcDestroyProgram>;
using nvvm_program = compiler_handle<nvvm_api, nvvmProgram, &nvvm_api::nvvmDestroyProgram>;
using nvjitlink_handle =
    compiler_handle<nvjitlink_api, nvJitLinkHandle, &nvjitlink_api::nvJitLinkDestroy>;

}  // namespace cucore::detail
