// NVRTC's bundled headers (NVRTC 13.3+), installed into a directory cucore controls.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "cucore/toolkit.hpp"

namespace cucore::detail {

// The directory holding the bundled headers of the NVRTC this process compiles with:
// default_cache_dir()/bundled-headers/<32 hex of NVRTC's file identity>, installed on first use
// (nvrtcInstallBundledHeaders into a temp directory, then rename: safe when processes race) and
// reused afterwards without loading NVRTC. It must be this user's and writable by nobody else.
// Throws invalid_argument when the NVRTC has no bundled headers (older than 13.3), error or
// library_error when the install fails, library_not_found without NVRTC.
std::string bundled_headers_directory();

// Whether the NVRTC at `nvrtc_file` may carry bundled headers: a libnvrtc-builtins.so.X.Y with
// X.Y >= 13.3 beside it (stat only, nothing loaded).
bool may_have_bundled_headers(const std::string& nvrtc_file);

struct bundled_headers_info {
  unsigned files = 0;
  std::size_t bytes = 0;  // uncompressed
  version cuda;
};
// What the NVRTC loaded in this process bundles (nvrtcGetBundledHeadersInfo), or nullopt when it
// has none, it lacks the call, or NVRTC is not loaded.
std::optional<bundled_headers_info> bundled_headers_info_of_loaded_nvrtc();

}  // namespace cucore::detail
