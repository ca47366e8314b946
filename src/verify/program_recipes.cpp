// Recipes of cache entries (verify/program_recipes.hpp).
#include "verify/program_recipes.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>

#include "cache/posix_file.hpp"
#include "common/environment.hpp"
#include "common/sha256.hpp"
#include "cucore/cache/config.hpp"
#include "cucore/log.hpp"
#include "server/wire.hpp"

namespace cucore::detail {

namespace {

namespace fs = std::filesystem;

// "cucore-recipe-1\n", the body's SHA-256 (64 hex digits) and "\n", then the body: wire fields
// (server/wire.hpp) that hold the key, the source type, the target, the source, the options, the
// name expressions of both kinds and the working directory.
constexpr std::string_view kMagic = "cucore-recipe-1\n";
constexpr std::size_t kDigestLine = 65;
// A recipe larger than this is not one (sources and in-memory headers of real programs are far
// smaller); reading stops there.
constexpr std::uintmax_t kMaxRecipe = 256u << 20;

bool is_key_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string sha256_of(std::string_view text) {
  const auto hex = sha256_hex(std::as_bytes(std::span<const char>(text.data(), text.size())));
  return std::string(hex.data(), hex.size());
}

// $CUCORE_CACHE_RECIPES: nullopt when unset or empty (the file decides).
std::optional<bool> recipes_from_env() {
  static const std::optional<bool> value = []() -> std::optional<bool> {
    const auto recipes = env::flag(env::variable::cache_recipes);
    if (!recipes.malformed()) return recipes.value;
    cucore::log(log_level::warning,
                "CUCORE_CACHE_RECIPES=\"" + std::string(recipes.text) +
                    "\": not 1 or 0 (true/false, on/off, yes/no); recipes are not kept");
    return false;
  }();
  return value;
}

// cucore.conf's `recipes` of the directory cache whose statistics directory is `stats_dir`
// (ROOT/stats); false for an SQLite cache (FILE.stats) and a file that cannot be read.
bool recipes_from_config(const fs::path& stats_dir) {
  if (stats_dir.filename() != "stats") return false;
  try {
    // Shared access: whoever may write the cache may ask it to keep recipes (a size cost only).
    return read_cache_config(stats_dir.parent_path(), cache_access::shared).recipes.value_or(false);
  } catch (const std::exception& e) {
    cucore::log(log_level::debug, std::string("recipes: ") + e.what() + "; not kept");
    return false;
  }
}

std::string encode_body(std::string_view key_hex, const program_cache_key_inputs& inputs,
                        std::string_view working_directory) {
  server::writer w;
  w.str(key_hex);
  w.u32(static_cast<std::uint32_t>(inputs.code_type));
  w.u32(static_cast<std::uint32_t>(inputs.target));
  w.str(inputs.code);
  server::put_options(w, inputs.options);
  w.strings(inputs.name_expressions);
  w.strings(inputs.byte_name_expressions);
  w.str(working_directory);
  return w.take();
}

std::optional<program_recipe> decode(std::string_view text, std::string_view key_hex) {
  if (!text.starts_with(kMagic) || text.size() < kMagic.size() + kDigestLine) return std::nullopt;
  const std::string_view digest = text.substr(kMagic.size(), 64);
  if (text[kMagic.size() + 64] != '\n') return std::nullopt;
  const std::string_view body = text.substr(kMagic.size() + kDigestLine);
  if (sha256_of(body) != digest) return std::nullopt;
  try {
    server::reader r(body);
    if (r.str() != key_hex) return std::nullopt;  // another entry's recipe
    program_recipe out;
    const std::uint32_t type = r.u32();
    const std::uint32_t target = r.u32();
    if (type > static_cast<std::uint32_t>(source_type::nvvm) ||
        target > static_cast<std::uint32_t>(code_type::tile_ir)) {
      return std::nullopt;
    }
    out.code_type = static_cast<source_type>(type);
    out.target = static_cast<code_type>(target);
    out.code = r.str();
    server::get_options(r, out.options);
    out.name_expressions = r.strings();
    out.byte_name_expressions = r.strings();
    out.working_directory = r.str();
    r.finish();
    if (out.code.empty()) return std::nullopt;
    return out;
  } catch (const std::exception&) {
    return std::nullopt;  // a wire_error: fields that do not decode
  }
}

}  // namespace

program_cache_key_inputs program_recipe::inputs() const {
  program_cache_key_inputs in;
  in.code = code;
  in.code_type = code_type;
  in.options = options;
  in.target = target;
  in.name_expressions = name_expressions;
  in.byte_name_expressions = byte_name_expressions;
  return in;
}

bool recipes_enabled(const fs::path& stats_dir) noexcept {
  try {
    if (const auto env = recipes_from_env()) return *env;
    static std::mutex mutex;
    static std::map<std::string, bool> by_directory;
    std::lock_guard lock(mutex);
    const auto [it, inserted] = by_directory.try_emplace(stats_dir.string(), false);
    if (inserted) it->second = recipes_from_config(stats_dir);
    return it->second;
  } catch (...) {
    return false;
  }
}

std::string encode_program_recipe(std::string_view key_hex, const program_cache_key_inputs& inputs,
                                  std::string_view working_directory) {
  const std::string body = encode_body(key_hex, inputs, working_directory);
  return std::string(kMagic) + sha256_of(body) + "\n" + body;
}

void record_program_recipe(const std::optional<fs::path>& stats_dir, std::string_view key_hex,
                           const program_cache_key_inputs& inputs) noexcept {
  try {
    if (!stats_dir || inputs.extra_digest || !is_key_hex(key_hex)) return;
    if (!recipes_enabled(*stats_dir)) return;
    struct stat parent {};
    if (::stat(stats_dir->c_str(), &parent) != 0 || !S_ISDIR(parent.st_mode)) return;
    const fs::path dir = *stats_dir / "recipes";
    // The statistics directory's permissions, not the umask's (a cache shared by a group).
    if (::mkdir(dir.c_str(), 0700) == 0) ::chmod(dir.c_str(), parent.st_mode & 07777);
    std::error_code ec;
    const std::string cwd = fs::current_path(ec).string();
    const std::string text = encode_program_recipe(key_hex, inputs, cwd);
    const std::string path = (dir / std::string(key_hex)).string();
    const std::string temp = path + ".tmp-" + std::to_string(::getpid());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                          parent.st_mode & 0666);
    if (fd < 0) {
      cucore::log(log_level::debug,
                  "recipes: cannot write " + temp + ": " + posix::last_error().message());
      return;
    }
    ::fchmod(fd, parent.st_mode & 0666);
    const std::error_code failed =
        posix::write_fully(fd, std::as_bytes(std::span<const char>(text.data(), text.size())));
    ::close(fd);
    // A reader sees the whole recipe or none (rename over a previous one of the same key).
    if (failed || ::rename(temp.c_str(), path.c_str()) != 0) {
      cucore::log(log_level::debug, "recipes: cannot write " + path + ": " +
                                        (failed ? failed : posix::last_error()).message());
      ::unlink(temp.c_str());
    }
  } catch (const std::exception& e) {
    cucore::log(log_level::debug, std::string("recipes: not recorded: ") + e.what());
  } catch (...) {
  }
}

void record_program_recipe(const std::optional<fs::path>& stats_dir, std::string_view key_hex,
                           std::string_view code, source_type type, const program_options& options,
                           code_type target,
                           std::span<const std::string> name_expressions) noexcept {
  try {
    // Checked first: off (the usual case) copies nothing.
    if (!stats_dir || !recipes_enabled(*stats_dir)) return;
    program_cache_key_inputs inputs;
    inputs.code = code;
    inputs.code_type = type;
    inputs.options = options;
    inputs.target = target;
    inputs.name_expressions.assign(name_expressions.begin(), name_expressions.end());
    record_program_recipe(stats_dir, key_hex, inputs);
  } catch (...) {
  }
}

recipe_read read_program_recipe_file(const fs::path& stats_dir, std::string_view key_hex) noexcept {
  try {
    if (!is_key_hex(key_hex)) return {};
    const fs::path path = stats_dir / "recipes" / std::string(key_hex);
    std::error_code ec;
    const auto status = fs::symlink_status(path, ec);
    if (ec || !fs::exists(status)) return {};
    if (!fs::is_regular_file(status) || fs::file_size(path, ec) > kMaxRecipe || ec) {
      return {recipe_read_status::damaged, std::nullopt};
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return {recipe_read_status::damaged, std::nullopt};
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    auto recipe = decode(text, key_hex);
    if (!recipe) return {recipe_read_status::damaged, std::nullopt};
    return {recipe_read_status::ok, std::move(recipe)};
  } catch (...) {
    return {recipe_read_status::damaged, std::nullopt};
  }
}

std::optional<program_recipe> read_program_recipe(const fs::path& stats_dir,
                                                  std::string_view key_hex) noexcept {
  return read_program_recipe_file(stats_dir, key_hex).recipe;
}

bool remove_program_recipe(const fs::path& stats_dir, std::string_view key_hex) noexcept {
  if (!is_key_hex(key_hex)) return false;
  const fs::path path = stats_dir / "recipes" / std::string(key_hex);
  return ::unlink(path.c_str()) == 0;
}

std::vector<recipe_file> list_program_recipes(const fs::path& stats_dir) noexcept {
  std::vector<recipe_file> out;
  try {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(stats_dir / "recipes", ec)) {
      const std::string name = e.path().filename().string();
      if (!is_key_hex(name)) continue;  // temporary files, anything else
      std::error_code size_ec, time_ec;
      const auto bytes = e.file_size(size_ec);
      const auto modified = e.last_write_time(time_ec);
      out.push_back({name, size_ec ? 0 : bytes, time_ec ? fs::file_time_type::min() : modified});
    }
  } catch (...) {
  }
  return out;
}

}  // namespace cucore::detail
