// RAII owners for the compiler libraries' handles, and the helpers that read their logs.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cucore/error.hpp"
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

// A compiler's log through its two calls, `size_fn(handle, &size)` then `get_fn(handle, buffer)`
// (each answering `success` when it worked), without the terminating NULs; empty when either call
// fails or there is no log.
template <class Handle, class Size, class Get, class Result>
std::string read_log(Handle handle, Size size_fn, Get get_fn, Result success) {
  std::size_t size = 0;
  if (size_fn(handle, &size) != success || size == 0) return {};
  std::string log(size, '\0');
  if (get_fn(handle, log.data()) != success) return {};
  return trim_nul(std::move(log));
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

// After NVRTC refused the options (NVRTC_ERROR_INVALID_OPTION): when `arch` ("sm_9999",
// "compute_9999", "sm_90a") names an architecture this NVRTC does not compile for, throws
// invalid_argument naming it and the ones it does (nvrtcGetSupportedArchs) instead of NVRTC's bare
// "invalid value for --gpu-architecture". Returns when the arch is supported (another option was
// refused) or NVRTC cannot list its architectures.
inline void check_nvrtc_supports_arch(const nvrtc_api& api, const std::string& arch) {
  const std::size_t digits = arch.find_first_of("0123456789");
  if (digits == std::string::npos) return;
  const std::size_t end = arch.find_first_not_of("0123456789", digits);
  const std::string number = arch.substr(digits, end - digits);
  int count = 0;
  if (api.nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) return;
  std::vector<int> supported(static_cast<std::size_t>(count));
  if (api.nvrtcGetSupportedArchs(supported.data()) != NVRTC_SUCCESS) return;
  std::string list;
  for (const int a : supported) {
    if (std::to_string(a) == number) return;
    list += (list.empty() ? "sm_" : ", sm_") + std::to_string(a);
  }
  throw invalid_argument("arch \"" + arch + "\" is not an architecture NVRTC " +
                         api.nvrtc_version.to_string() + " (" + api.library->path() +
                         ") compiles for: it supports " + list +
                         " (also as compute_XY, and with an \"a\" or \"f\" suffix where the GPU "
                         "has one); pick one of those, or use a newer NVRTC");
}

}  // namespace cucore::detail
