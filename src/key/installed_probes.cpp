// installed_compiler_probes(): the identities of the compiler libraries this process loads.
//
// Version calls give major.minor only (and libNVVM reports 2.0 across many toolkit releases), so
// each compiler probe also reads the release and build of the toolkit from the output of one tiny,
// fixed compile: NVRTC and libNVVM write "Compiler Build ID: CL-..." and "Cuda compilation tools,
// release 13.0, V13.0.88" into the PTX header, nvJitLink writes the release into the cubin's tool
// note. Only those strings enter the key, never compiler output as such. When that extra probe
// fails the identity says "unknown" there: the key is then as precise as the version call allows.
//
// Every probe runs once per process, on first use, thread-safe.
#include <array>
#include <string>
#include <string_view>

#include "cucore/cache/key.hpp"
#include "cucore/linker.hpp"
#include "loader/libraries.hpp"
#include "program/compiler_handles.hpp"

namespace cucore {
namespace {

constexpr std::string_view kLibraryNotFound = "library_not_found";

// The text after `marker` up to the end of its line (or a NUL), printable and at most 80 chars.
std::string text_after(std::string_view haystack, std::string_view marker) {
  const auto pos = haystack.find(marker);
  if (pos == std::string_view::npos) return {};
  std::string out;
  for (std::size_t i = pos + marker.size(); i < haystack.size() && out.size() < 80; ++i) {
    const auto c = static_cast<unsigned char>(haystack[i]);
    if (c == '\n' || c == '\r' || c == '\0') break;
    if (c >= 0x20 && c < 0x7F && c != ';') out += static_cast<char>(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// ";release=V13.0.88" from "...Cuda compilation tools, release 13.0, V13.0.88...".
std::string release_of(std::string_view output) {
  std::string release = text_after(output, "Cuda compilation tools, release ");
  if (auto v = release.find(", V"); v != std::string::npos) release = release.substr(v + 2);
  return ";release=" + (release.empty() ? std::string("unknown") : release);
}

// ";release=V13.0.88;build=CL-36424714" from a PTX header.
std::string ptx_identity(std::string_view ptx) {
  std::string build = text_after(ptx, "Compiler Build ID: ");
  return release_of(ptx) + ";build=" + (build.empty() ? std::string("unknown") : build);
}

std::string nvrtc_identity(const detail::nvrtc_api& api) {
  try {
    nvrtcProgram raw = nullptr;
    if (api.nvrtcCreateProgram(&raw, "extern \"C\" __global__ void cucore_identity_probe() {}",
                               "cucore_identity_probe", 0, nullptr, nullptr) != NVRTC_SUCCESS) {
      return ptx_identity({});
    }
    detail::nvrtc_program prog(api, raw);
    std::size_t size = 0;
    if (api.nvrtcCompileProgram(prog.get(), 0, nullptr) != NVRTC_SUCCESS ||
        api.nvrtcGetPTXSize(prog.get(), &size) != NVRTC_SUCCESS) {
      return ptx_identity({});
    }
    std::string ptx(size, '\0');
    if (api.nvrtcGetPTX(prog.get(), ptx.data()) != NVRTC_SUCCESS) return ptx_identity({});
    return ptx_identity(ptx);
  } catch (...) {
    return ptx_identity({});
  }
}

std::string nvvm_identity(const detail::nvvm_api& api) {
  try {
    const auto& ir = api.versions.ir;
    // An empty module: the PTX header is all that is needed.
    const std::string module =
        "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n"
        "target triple = \"nvptx64-nvidia-cuda\"\n"
        "!nvvmir.version = !{!0}\n"
        "!0 = !{i32 " +
        std::to_string(ir.major) + ", i32 " + std::to_string(ir.minor) + "}\n";
    nvvmProgram raw = nullptr;
    if (api.nvvmCreateProgram(&raw) != NVVM_SUCCESS) return ptx_identity({});
    detail::nvvm_program prog(api, raw);
    std::size_t size = 0;
    if (api.nvvmAddModuleToProgram(prog.get(), module.data(), module.size(),
                                   "cucore_identity_probe") != NVVM_SUCCESS ||
        api.nvvmCompileProgram(prog.get(), 0, nullptr) != NVVM_SUCCESS ||
        api.nvvmGetCompiledResultSize(prog.get(), &size) != NVVM_SUCCESS) {
      return ptx_identity({});
    }
    std::string ptx(size, '\0');
    if (api.nvvmGetCompiledResult(prog.get(), ptx.data()) != NVVM_SUCCESS) return ptx_identity({});
    return ptx_identity(ptx);
  } catch (...) {
    return ptx_identity({});
  }
}

std::string nvjitlink_identity(const detail::nvjitlink_api& api) {
  static constexpr std::string_view kPtx =
      ".version 7.0\n.target sm_75\n.address_size 64\n"
      ".visible .entry cucore_identity_probe()\n{\n\tret;\n}\n";
  // The oldest architecture the library still targets; PTX for sm_75 JIT-compiles to any newer.
  for (const char* arch : {"-arch=sm_75", "-arch=sm_80", "-arch=sm_90", "-arch=sm_100"}) {
    try {
      nvJitLinkHandle raw = nullptr;
      if (api.nvJitLinkCreate(&raw, 1, &arch) != NVJITLINK_SUCCESS) continue;
      detail::nvjitlink_handle handle(api, raw);
      std::size_t size = 0;
      // PTX goes in NUL-terminated: the literal behind kPtx has its terminator.
      if (api.nvJitLinkAddData(handle.get(), NVJITLINK_INPUT_PTX, kPtx.data(), kPtx.size() + 1,
                               "cucore_identity_probe") != NVJITLINK_SUCCESS ||
          api.nvJitLinkComplete(handle.get()) != NVJITLINK_SUCCESS ||
          api.nvJitLinkGetLinkedCubinSize(handle.get(), &size) != NVJITLINK_SUCCESS) {
        continue;
      }
      std::string cubin(size, '\0');
      if (api.nvJitLinkGetLinkedCubin(handle.get(), cubin.data()) != NVJITLINK_SUCCESS) continue;
      return release_of(cubin);
    } catch (...) {
      // Try the next architecture.
    }
  }
  return release_of({});
}

version_probe probe_nvrtc() {
  const auto& table = detail::nvrtc_table();
  if (!table.api) return {false, std::string(kLibraryNotFound)};
  return {true, table.api->nvrtc_version.to_string() + nvrtc_identity(*table.api)};
}

version_probe probe_nvvm() {
  const auto& table = detail::nvvm_table();
  if (!table.api) return {false, std::string(kLibraryNotFound)};
  const auto& v = table.api->versions;
  return {true, "lib=" + v.library.to_string() + ";ir=" + v.ir.to_string() + "." +
                    v.debug_metadata.to_string() + nvvm_identity(*table.api)};
}

linker_probe probe_linker() {
  linker_probe p;
  p.backend = linker::which_backend();
  if (p.backend == linker_backend::nvjitlink) {
    const auto& table = detail::nvjitlink_table();
    if (!table.api) {
      p.failure = kLibraryNotFound;
      return p;
    }
    p.ok = true;
    p.version = table.api->nvjitlink_version.to_string() + nvjitlink_identity(*table.api);
    return p;
  }
  const auto& table = detail::driver_table();
  if (!table.api) {
    p.failure = kLibraryNotFound;
    return p;
  }
  // cuDriverGetVersion names the CUDA version (13000), shared by many drivers whose JIT compilers
  // differ: the file the loader mapped names the driver itself (libcuda.so.580.65.06).
  const std::string& path = table.status.path;
  const auto slash = path.rfind('/');
  p.ok = true;
  p.version = std::to_string(table.api->driver_version) +
              ";file=" + (slash == std::string::npos ? path : path.substr(slash + 1));
  return p;
}

class installed_probes final : public compiler_probes {
 public:
  version_probe nvrtc() const override {
    static const version_probe probe = probe_nvrtc();
    return probe;
  }
  version_probe nvvm() const override {
    static const version_probe probe = probe_nvvm();
    return probe;
  }
  linker_probe linker() const override {
    static const linker_probe probe = probe_linker();
    return probe;
  }
};

}  // namespace

const compiler_probes& installed_compiler_probes() {
  static const installed_probes probes;
  return probes;
}

}  // namespace cucore
