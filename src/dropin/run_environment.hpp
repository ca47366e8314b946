// What `cucore run` (tools/cucore/run_command.cpp, dropin_check.cpp) and its drop-ins read of the
// environment alike, so that the command and the libraries it puts in a program's way agree:
// CUCORE_LOG, the program's loader path, a loader path list, the loader cache's directories.
// Header-only: the drop-in engines and the CLI are separate binaries.
#pragma once

#include <glob.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/environment.hpp"
#include "cucore/log.hpp"

namespace cucore::dropin {

// The level from which messages are said, from CUCORE_LOG: unset, "", "0", "off" or "none":
// silent (99); "error"; "warning", "1" or any other value; "info"; "debug".
inline int log_threshold_from_environment() {
  const auto level = env::log_threshold();
  return level ? static_cast<int>(*level) : 99;
}

// The program's own loader path: $CUCORE_RUN_LD_LIBRARY_PATH, which an outer `cucore run` set (even
// empty, it is the program's), else $LD_LIBRARY_PATH; nullopt when neither is set.
inline std::optional<std::string_view> program_library_path() {
  if (const auto kept = env::text_even_empty(env::variable::run_ld_library_path)) return kept;
  if (const char* own = std::getenv("LD_LIBRARY_PATH")) return std::string_view(own);
  return std::nullopt;
}

// The elements of a ':'-separated list (LD_LIBRARY_PATH, PATH). An empty element is the current
// directory for the loader; it is left out, not guessed.
inline std::vector<std::string> split_path_list(std::string_view text) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find(':', begin);
    if (end == std::string_view::npos) end = text.size();
    if (end > begin) parts.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

// Appends the directories of `file` (/etc/ld.so.conf) and the files it includes (globs, nested up
// to 4 deep), in order: where the loader cache finds libraries that no LD_LIBRARY_PATH names.
inline void add_ld_so_conf(const std::string& file, std::vector<std::string>& dirs, int depth = 0) {
  std::ifstream in(file);
  std::string line;
  while (depth < 4 && std::getline(in, line)) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") + 1 - first);
    if (line.starts_with("include ") || line.starts_with("include\t")) {
      std::string pattern = line.substr(8);
      pattern.erase(0, pattern.find_first_not_of(" \t"));
      if (!pattern.starts_with('/')) pattern = "/etc/" + pattern;
      glob_t found{};
      if (::glob(pattern.c_str(), 0, nullptr, &found) == 0) {
        for (std::size_t i = 0; i < found.gl_pathc; ++i) {
          add_ld_so_conf(found.gl_pathv[i], dirs, depth + 1);
        }
      }
      ::globfree(&found);
    } else if (line.starts_with('/')) {
      dirs.push_back(line);
    }
  }
}

}  // namespace cucore::dropin
