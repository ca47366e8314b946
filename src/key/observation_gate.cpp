#include "key/observation_gate.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "key/compiler_environment.hpp"
#include "key/walk_manifest.hpp"

namespace cucore::detail {
namespace {

std::string current_directory_or_root() {
  std::string buffer(4096, '\0');
  if (::getcwd(buffer.data(), buffer.size()) == nullptr) return "/";
  buffer.resize(std::strlen(buffer.c_str()));
  return buffer;
}

std::string_view base_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The directory part of an absolute path ("/" for a name in the root).
std::string_view base_name_dir(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos || slash == 0 ? std::string_view("/")
                                                       : path.substr(0, slash);
}

store_refusal unkeyed(std::string what, std::string name) {
  return store_refusal{cache_skip_reason::unkeyed_input, name,
                       "the compiler read " + what +
                           ", which the cache key does not cover: the result is not stored "
                           "(the compile is cached once the key covers it; please report it)"};
}

}  // namespace

std::optional<store_refusal> check_observed_inputs(const observed_inputs& seen,
                                                   const key_coverage& key) {
  if (!seen.unobserved.empty()) {
    return store_refusal{cache_skip_reason::unkeyed_input,
                         {},
                         "what the compile read could not be observed (" + seen.unobserved +
                             "): the result is not stored"};
  }
  if (const observed_input* in = first_process_view_input(seen)) {
    const bool effect = in->call == observed_call::side_effect;
    return store_refusal{
        cache_skip_reason::process_view_input, in->name,
        effect ? "the compiler had a side effect (" + in->name +
                     "): its output is not a function of its inputs alone, so it is not stored"
               : "the compiler read " + in->name +
                     ", whose contents are this process's or can change without the file "
                     "changing (a pseudo file system, a device, a FIFO): the result is not "
                     "stored"};
  }
  if (seen.inputs.empty()) return std::nullopt;
  const std::string cwd = current_directory_or_root();
  std::unordered_set<std::string> covered;
  if (key.walk != nullptr) {
    covered.reserve(key.walk->checks.size() * 2);
    for (const auto& c : key.walk->checks) {
      if (!c.path.empty()) covered.insert(absolute_path(c.path, cwd));
    }
    // A manifest read from disk keeps grouped checks' paths only in their groups (a directory
    // and a last component): without these, its every header looked unkeyed (a refused store).
    for (const auto& group : key.walk->by_directory) {
      for (const auto& [index, name] : group.names) {
        covered.insert(absolute_path(group.dir + name, cwd));
      }
    }
  }
  std::unordered_set<std::string> memory_headers;
  for (const auto& h : key.memory_headers) memory_headers.insert(absolute_path(h, cwd));
  // NVRTC names a program without a name "default_program".
  const std::string program =
      absolute_path(key.program_name.empty() ? "default_program" : key.program_name, cwd);
  // Directories a stat may find: the working directory (NVRTC stats it with getcwd), the
  // program's, and those holding a path the walk checked (the search path's own).
  std::unordered_set<std::string> directories;
  const auto add_ancestors = [&](std::string path) {
    for (auto slash = path.rfind('/'); slash != std::string::npos && slash > 0;
         slash = path.rfind('/')) {
      path.resize(slash);
      if (!directories.insert(path).second) break;
    }
  };
  const auto is_covered_directory = [&](const std::string& path) {
    if (directories.empty()) {
      directories.insert(cwd);
      directories.insert("/");
      // NVRTC stats $PWD beside getcwd() (a variable of the table: measured harmless).
      if (const char* pwd = std::getenv("PWD"); pwd != nullptr && pwd[0] == '/') {
        directories.insert(absolute_path(pwd, cwd));
      }
      add_ancestors(program);
      for (const auto& p : covered) add_ancestors(p);
    }
    struct stat st {};
    return directories.count(path) != 0 && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  };
  for (const auto& in : seen.inputs) {
    switch (in.call) {
      case observed_call::getenv:
        if (find_compiler_variable(in.name) == nullptr) {
          return unkeyed("the environment variable " + in.name, in.name);
        }
        break;
      case observed_call::getcwd:
        // NVRTC reads it in every compile; what it does with it is the key's working-directory
        // rule, measured by the context oracle (the key holds it where an output embeds it).
        break;
      case observed_call::side_effect:
        break;  // first_process_view_input returned it already
      case observed_call::clock:
        break;  // what the output holds of it: clock_in_output, where the output is at hand
      case observed_call::open:
      case observed_call::stat:
      case observed_call::lstat:
      case observed_call::opendir: {
        if (covered.count(in.name) != 0) break;
        // Statted, never opened (traced): the program's own name, the names of in-memory
        // headers, and NVRTC's probes in the working directory (or the program's): its two
        // internal names, and NVRTC 13.5's cuda_tile.h (measured: statted in every Tile compile,
        // never opened, a file there holding #error changes nothing).
        const auto base = base_name(in.name);
        const std::string_view parent = base_name_dir(in.name);
        const bool probe = in.call == observed_call::stat || in.call == observed_call::lstat;
        const bool beside = parent == cwd || parent == base_name_dir(program);
        if (probe && (in.name == program ||
                      (beside && (base == "__nv_nvrtc_builtin_header.h" ||
                                  base == "__nv_name_map" || base == "cuda_tile.h")))) {
          break;
        }
        if (probe && memory_headers.count(in.name) != 0) break;
        if (probe && in.found && is_covered_directory(in.name)) break;
        // NVRTC 13.3+'s --use-bundled-headers=DIR protocol, in a directory the key searches: it
        // flocks DIR/.nvrtc_install.lock (never reads it) and reads DIR/.nvrtc_headers_version,
        // which matched its own version (else it would reinstall: a side effect, refused).
        if ((base == ".nvrtc_install.lock" || base == ".nvrtc_headers_version") &&
            is_covered_directory(std::string(parent))) {
          break;
        }
        if (key.extra_digest) break;
        return unkeyed(std::string(in.found ? "" : "(found absent) ") + in.name + " (" +
                           std::string(to_string(in.call)) + ")",
                       in.name);
      }
    }
  }
  return std::nullopt;
}

}  // namespace cucore::detail
