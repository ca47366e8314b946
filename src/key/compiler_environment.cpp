#include "key/compiler_environment.hpp"

#include "common/environment.hpp"
#include "program/nvrtc_option_table.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace cucore::detail {

namespace {

// Whether `flags` hold one of the options named (their canonical names in the option table), in
// any spelling NVRTC takes: one or two dashes, '_' for '-', short or long name.
bool has_option(std::span<const std::string> flags, std::span<const std::string_view> names) {
  for (const auto& parsed : parse_nvrtc_option_list(flags)) {
    if (parsed.option == nullptr) continue;
    if (std::find(names.begin(), names.end(), parsed.option->canonical) != names.end()) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool embeds_working_directory(std::span<const std::string> flags, code_type target) {
  if (target == code_type::ltoir || target == code_type::tile_ir) return true;
  // Line information (-lineinfo), debug information (-G), LTO-IR (-dlto, --gen-opt-lto) and Tile
  // IR (-enable-tile, -tile-only) name getcwd() + the program name.
  constexpr std::array<std::string_view, 6> kEmbedding{"lineinfo",    "G",           "dlto",
                                                       "gen-opt-lto", "enable-tile", "tile-only"};
  return has_option(flags, kEmbedding);
}

bool embeds_file_times(std::span<const std::string> flags, code_type target) {
  if (target != code_type::cubin) return false;
  constexpr std::array<std::string_view, 2> kDebugInfo{"lineinfo", "G"};
  return has_option(flags, kDebugInfo);
}

std::string working_directory() {
  std::string buffer(4096, '\0');
  for (;;) {
    if (::getcwd(buffer.data(), buffer.size()) != nullptr) {
      buffer.resize(std::strlen(buffer.c_str()));
      return buffer;
    }
    if (errno != ERANGE || buffer.size() > (1u << 20)) {
      return "<getcwd failed: " + std::string(std::strerror(errno)) + ">";
    }
    buffer.resize(buffer.size() * 2);
  }
}

bool sloppiness_allows(std::string_view what) {
  const auto value = env::text(env::variable::sloppiness);
  if (!value) return false;
  std::string_view rest = *value;
  while (!rest.empty()) {
    const std::size_t end = rest.find_first_of(", \t");
    if (rest.substr(0, end) == what) return true;
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return false;
}

}  // namespace cucore::detail
