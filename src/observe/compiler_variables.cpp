#include "observe/compiler_variables.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>

namespace cucore::detail {

namespace {

using enum environment_effect;

// Found by interposing getenv and secure_getenv in uncached compiles (plain, CUB, --lineinfo,
// -G, LTO-IR, libNVVM, nvJitLink). Keyed unless measured otherwise: a variable keyed needlessly
// costs a miss, one missed is a stale hit.
constexpr std::array kTable{
    environment_variable{"NVRTC_APPEND_FLAGS", keyed, "options appended to every compile"},
    environment_variable{"NVRTC_DISABLE_PCH", keyed, "turns automatic PCH off"},
    environment_variable{"NVRTC_PCH_HEAP_SIZE", keyed, "PCH heap size (PCH use)"},
    environment_variable{"EDG_BASE", keyed, "front end's base directory (files it reads)"},
    environment_variable{"EDG_MODULES_PATH", keyed, "front end's module search path"},
    environment_variable{"NV_NVVM_VERSION", keyed,
                         "measured: nvvm-latest changes every output, other values fail"},
    environment_variable{"NVVM_IR_VER_CHK", keyed, "NVVM IR version check"},
    environment_variable{"LLVM_OVERRIDE_PRODUCER", keyed, "measured: changes LTO-IR"},
    environment_variable{"CUDA_CACHE_DISABLE", keyed, "not measured"},
    environment_variable{"NVRTC_INTERNAL_GLOBAL_LOCK", keyed, "not measured"},
    environment_variable{"NVRTC_DISABLE_CONCURRENT_NVVM", keyed, "not measured"},
    environment_variable{"LIBNVVM_DISABLE_CONCURRENT_API", keyed, "not measured"},
    environment_variable{"NVRTCWIZ", keyed, "not measured (an internal switch)"},
    environment_variable{"CAN_FINALIZE_DEBUG", keyed, "not measured (an internal switch)"},
    environment_variable{"bar", keyed, "not measured (read by NVRTC 13.0's front end)"},
    environment_variable{"LIBNVVM_NVVM_VERSION", keyed,
                         "libNVVM's NV_NVVM_VERSION (read by libNVVM 13.0, found by the oracle)"},
    environment_variable{"NVJITLINK_TRACE_MESSAGES", keyed,
                         "not measured (read by nvJitLink 13.0, found by the oracle)"},
    environment_variable{"FINALIZER_USE_LEGACY_ELF_BUILDER", keyed,
                         "measured: changes the cubin (read by NVRTC 13.5, found by the version "
                         "matrix's context oracle)"},
    environment_variable{"DUMP_KNOBS_TO_FILE", bypass, "writes the compiler's knobs to a file"},
    environment_variable{"FINALIZER_CUBIE", bypass,
                         "measured: NVRTC 13.5 writes the cubin to a file it names"},
    environment_variable{"AS_SECURE_LOG_FILE", bypass, "names a log file the compiler writes"},
    environment_variable{"PWD", harmless,
                         "measured: NVRTC writes getcwd(), never $PWD (the working directory "
                         "is keyed where it is embedded)"},
    // Read by NVRTC 13.5 (the version matrix's context oracle); measured: PTX, cubin, -G cubin
    // and LTO-IR unchanged. Keying MAKEFLAGS would also cost every compile under make a miss:
    // make 4.4's jobserver names a per-run fifo there.
    environment_variable{"MAKEFLAGS", harmless, "measured: outputs unchanged (NVRTC 13.5)"},
    environment_variable{"OPENSSL_ia32cap", harmless,
                         "measured: outputs unchanged (NVRTC 13.5; OpenSSL's CPU feature mask)"},
    environment_variable{"LLVM_IGNORED_ENV_VAR", harmless,
                         "measured: outputs unchanged (NVRTC 13.5)"},
    // Read in PCH mode (the store gate's observation): where the front end makes its scratch
    // file (created and unlinked at once); the context oracle changes it: outputs unchanged.
    environment_variable{"TMPDIR", harmless,
                         "measured: outputs unchanged (NVRTC 13.0, PCH mode's scratch file)"},
};

}  // namespace

std::span<const environment_variable> compiler_environment() {
  return kTable;
}

const environment_variable* find_compiler_variable(std::string_view name) noexcept {
  const auto it = std::find_if(kTable.begin(), kTable.end(),
                               [&](const environment_variable& v) { return v.name == name; });
  return it == kTable.end() ? nullptr : &*it;
}

std::vector<std::string> keyed_environment() {
  std::vector<std::string> out;
  for (const auto& v : kTable) {
    if (v.effect != keyed) continue;
    if (const char* value = std::getenv(std::string(v.name).c_str())) {
      out.push_back(std::string(v.name) + '=' + value);
    }
  }
  return out;
}

namespace {

// The keyed variables as the first compiler library was loaded (once, never changed after).
struct load_time_environment {
  std::once_flag once;
  std::vector<std::optional<std::string>> values;  // kTable's order; unkeyed ones nullopt
};

load_time_environment& at_load() {
  static auto* e = new load_time_environment;  // leaked: keys may be made during exit
  return *e;
}

std::optional<std::string> value_of(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// The first call records (a compiler being loaded, or the first key made before any was: the
// values a compiler loaded after it would see, barring a change in between).
const std::vector<std::optional<std::string>>& noted_environment() {
  auto& e = at_load();
  std::call_once(e.once, [&] {
    for (const auto& v : kTable) {
      e.values.push_back(v.effect == keyed ? value_of(v.name) : std::nullopt);
    }
  });
  return e.values;
}

}  // namespace

void note_compiler_environment_at_load() {
  noted_environment();
}

std::optional<std::string> environment_bypass() {
  for (const auto& v : kTable) {
    if (v.effect == bypass && std::getenv(std::string(v.name).c_str()) != nullptr) {
      return "$" + std::string(v.name) + " is set (" + std::string(v.why) +
             "): a cache hit would skip that; unset it to use the cache";
    }
  }
  const auto& noted = noted_environment();
  for (std::size_t i = 0; i < std::size(kTable); ++i) {
    const auto& v = kTable[i];
    if (v.effect != keyed) continue;
    const auto now = value_of(v.name);
    if (now != noted[i]) {
      return "$" + std::string(v.name) + " changed since this process loaded the compilers (" +
             (noted[i] ? "\"" + *noted[i] + "\"" : std::string("unset")) + ", now " +
             (now ? "\"" + *now + "\"" : std::string("unset")) +
             "): the compilers read some variables once per process, so which value this compile "
             "uses cannot be told; set it before the process starts to use the cache";
    }
  }
  return std::nullopt;
}

}  // namespace cucore::detail
