#include "cucore/cache/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "cache/posix_file.hpp"
#include "cache/trust.hpp"
#include "common/environment.hpp"
#include "common/text.hpp"
#include "cucore/error.hpp"

namespace cucore {
namespace {

namespace posix = detail::posix;

constexpr std::string_view kKeys = "max_size, shared, umask, recipes";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<bool> parse_bool_word(std::string_view text) {
  const std::string t = detail::lower_case(trim(text));
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  return std::nullopt;
}

// The value of a true/false key; invalid_argument naming the key otherwise.
bool bool_setting(std::string_view key, std::string_view value) {
  const auto b = parse_bool_word(value);
  if (!b) {
    throw invalid_argument(std::string(key) + ": \"" + std::string(value) +
                           "\" is not true or false");
  }
  return *b;
}

unsigned parse_umask(std::string_view text) {
  unsigned value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 8);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty() || value > 0777) {
    throw invalid_argument("\"" + std::string(text) +
                           "\" is not a umask: use octal digits from 000 to 777, such as 002");
  }
  return value;
}

// Checks `value` for `key` and stores it in `config`. invalid_argument without file or line (the
// callers add them).
void apply(cache_config& config, std::string_view key, std::string_view value) {
  if (key == "max_size") {
    config.max_size = parse_cache_size(value);
  } else if (key == "shared") {
    config.shared = bool_setting(key, value);
  } else if (key == "umask") {
    config.umask = parse_umask(value);
  } else if (key == "recipes") {
    config.recipes = bool_setting(key, value);
  } else {
    throw invalid_argument("unknown key \"" + std::string(key) +
                           "\" (known: " + std::string(kKeys) + ")");
  }
}

struct parsed_line {
  std::string_view key, value;
  bool setting = false;  // false: blank or comment
};

parsed_line parse_line(std::string_view line) {
  const std::string_view t = trim(line);
  if (t.empty() || t.front() == '#') return {};
  const auto eq = t.find('=');
  if (eq == std::string_view::npos) {
    throw invalid_argument("expected \"key = value\", got \"" + std::string(t) + "\"");
  }
  parsed_line p{trim(t.substr(0, eq)), trim(t.substr(eq + 1)), true};
  if (p.key.empty()) throw invalid_argument("a line \"= value\" names no key");
  return p;
}

std::vector<std::string> read_lines(const std::string& path, struct stat& st, bool& exists) {
  exists = false;
  std::error_code ec;
  posix::unique_fd fd =
      posix::open_file(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, ec);
  if (!fd) {
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) return {};
    throw error("cannot read cache configuration " + path + ": " + ec.message());
  }
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw invalid_argument("cache configuration " + path + " is not a regular file; remove it");
  }
  exists = true;
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw error("cannot read cache configuration " + path + ": " + posix::last_error().message());
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (1 << 20)) {
      throw invalid_argument("cache configuration " + path + " is over 1 MiB: not a cucore.conf");
    }
  }
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

std::uint64_t parse_cache_size(std::string_view text) {
  const std::string_view t = trim(text);
  std::uint64_t value = 0;
  const char* end = t.data() + t.size();
  const auto [ptr, ec] = std::from_chars(t.data(), end, value);
  auto bad = [&](const std::string& why) {
    return invalid_argument("\"" + std::string(text) + "\" " + why);
  };
  if (ec == std::errc::result_out_of_range) throw bad("is out of range");
  if (ec != std::errc() || ptr == t.data()) {
    throw bad("is not a size (bytes, or N with K, M, G or T)");
  }
  std::string suffix =
      detail::lower_case(trim(std::string_view(ptr, static_cast<std::size_t>(end - ptr))));
  if (suffix.size() == 3 && suffix.ends_with("ib")) suffix.resize(1);
  int shift = 0;
  if (suffix == "k") {
    shift = 10;
  } else if (suffix == "m") {
    shift = 20;
  } else if (suffix == "g") {
    shift = 30;
  } else if (suffix == "t") {
    shift = 40;
  } else if (!suffix.empty() && suffix != "b") {
    throw bad("has an unknown unit: use K, M, G or T (powers of 1024)");
  }
  if (value > (std::numeric_limits<std::uint64_t>::max() >> shift)) throw bad("is out of range");
  return value << shift;
}

std::string format_cache_size(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"", "K", "M", "G", "T"};
  std::size_t unit = 0;
  while (unit + 1 < std::size(kUnits) && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + kUnits[unit];
}

cache_config read_cache_config(const std::filesystem::path& dir, cache_access access) {
  const std::string path = (dir / cache_config_file_name).string();
  struct stat st {};
  bool exists = false;
  const std::vector<std::string> lines = read_lines(path, st, exists);
  cache_config config;
  if (!exists) return config;
  detail::trust::require_acceptable(st, access, "cache configuration", path);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    try {
      const parsed_line p = parse_line(lines[i]);
      if (p.setting) apply(config, p.key, p.value);
    } catch (const invalid_argument& e) {
      throw invalid_argument(path + ":" + std::to_string(i + 1) + ": " + e.what() +
                             "; fix the line, or set it with `cucore cache config KEY VALUE`");
    }
  }
  if (config.shared && !detail::trust::acceptable(st, cache_access::private_to_user)) {
    config.shared.reset();  // only you decide whom you trust
  }
  return config;
}

void write_cache_config(const std::filesystem::path& dir, std::string_view key,
                        std::optional<std::string_view> value, cache_access access) {
  cache_config check;
  if (value) {
    apply(check, key, *value);
  } else if (key != "max_size" && key != "shared" && key != "umask" && key != "recipes") {
    throw invalid_argument("unknown key \"" + std::string(key) +
                           "\" (known: " + std::string(kKeys) + ")");
  }
  const detail::trust::create_modes modes = detail::trust::modes_for(access, std::nullopt);
  const std::string dir_str = dir.string();
  struct stat dst {};
  const bool existed = ::stat(dir_str.c_str(), &dst) == 0;
  if (std::error_code ec = posix::make_directories(dir_str, modes.dir)) {
    throw error("cannot create the cache directory " + dir_str + ": " + ec.message());
  }
  if (!existed) (void)detail::trust::set_created_dir_mode(dir_str, modes.dir, modes);
  if (::stat(dir_str.c_str(), &dst) == 0) {
    detail::trust::require_acceptable(dst, access, "cache directory", dir_str);
  }

  const std::string path = (dir / cache_config_file_name).string();
  struct stat st {};
  bool exists = false;
  std::vector<std::string> lines = read_lines(path, st, exists);
  if (exists) {
    detail::trust::require_acceptable(st, access, "cache configuration", path);
  }
  bool replaced = false;
  std::vector<std::string> out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    parsed_line p;
    try {
      p = parse_line(lines[i]);
    } catch (const invalid_argument&) {
      out.push_back(lines[i]);  // kept as it is: reading reports it
      continue;
    }
    if (p.setting && p.key == key) {
      if (value && !replaced) out.push_back(std::string(key) + " = " + std::string(trim(*value)));
      replaced = true;
      continue;
    }
    out.push_back(lines[i]);
  }
  if (value && !replaced) out.push_back(std::string(key) + " = " + std::string(trim(*value)));
  std::string text;
  for (const auto& line : out) text += line + "\n";

  // Atomic replace: a reader sees the old file or the new one.
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  posix::unique_fd fd =
      posix::open_file(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, modes.file, ec);
  if (!fd) throw error("cannot write " + tmp + ": " + ec.message());
  (void)detail::trust::set_created_file_mode(fd.get(), modes);
  ec = posix::write_fully(fd.get(), std::as_bytes(std::span(text.data(), text.size())));
  if (!ec) ec = fd.close();
  if (!ec) ec = posix::rename_path(tmp, path);
  if (ec) {
    (void)posix::unlink_path(tmp);
    throw error("cannot write the cache configuration " + path + ": " + ec.message());
  }
}

std::optional<bool> shared_cache_from_env() {
  const auto shared = env::flag(env::variable::cache_shared);
  if (shared.malformed()) {
    throw invalid_argument("$CUCORE_CACHE_SHARED: \"" + std::string(shared.text) +
                           "\" is not 1 or 0 (true/false, yes/no, on/off)");
  }
  return shared.value;
}

std::optional<std::uint64_t> cache_max_size_from_env() {
  const auto size = env::text(env::variable::cache_max_size);
  if (!size) return std::nullopt;
  try {
    return parse_cache_size(*size);
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string("$CUCORE_CACHE_MAX_SIZE: ") + e.what());
  }
}

}  // namespace cucore
