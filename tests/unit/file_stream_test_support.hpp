// What the directory cache's tests (file_stream_cache*_test.cpp) share: options without fsync,
// values of a given size, the cache's files read, written and aged raw, test hooks for a scope,
// and children that run as nobody so that file modes apply to them.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/entry_format.hpp"
#include "cache_test_support.hpp"
#include "cache_workload.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore::testing {

namespace fs = std::filesystem;

inline file_stream_cache_options fast(std::optional<std::uint64_t> cap = std::nullopt) {
  file_stream_cache_options o;
  o.fsync = false;
  o.max_size_bytes = cap;
  return o;
}

// fast(), with write failures thrown (write_failure_policy::strict).
inline file_stream_cache_options strict_fast() {
  file_stream_cache_options o = fast();
  o.on_write_failure = write_failure_policy::strict;
  return o;
}

inline object_code code_of(std::size_t n, const std::string& name = "c",
                           std::byte fill = std::byte{7}) {
  return object_code(code_type::cubin, std::vector<std::byte>(n, fill), name);
}

// `key` is a hit in `cache`, on the entry named `name` (`why` says what a miss means).
inline void expect_named(program_cache& cache, cache_key_ref key, std::string_view name,
                         std::string_view why = {}) {
  auto hit = cache.get(key);
  ASSERT_TRUE(hit) << why;
  EXPECT_EQ(hit->name(), name);
}

inline std::uint64_t stored_size(cache_key_ref key, const object_code& code) {
  return cucore::detail::encode_entry(key.bytes(), code).size();
}

inline std::vector<std::byte> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

// Writes `bytes` to `path` in place (the inode is kept: a tampered file, not a replaced one).
inline void write_bytes(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Regular files under entries/*/.
inline std::vector<fs::path> entry_files(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& shard : fs::directory_iterator(root / "entries", ec)) {
    if (!shard.is_directory() || shard.is_symlink()) continue;
    for (const auto& f : fs::directory_iterator(shard.path())) {
      if (f.is_regular_file() && !f.is_symlink()) out.push_back(f.path());
    }
  }
  return out;
}

inline std::vector<fs::path> tmp_files(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(root / "tmp", ec)) out.push_back(f.path());
  return out;
}

// Where `key`'s entry lives under `root`: found by storing it in a scratch cache (this does not
// assume the naming scheme; LayoutIsSha256OfTheKey checks that separately).
inline fs::path entry_file(const fs::path& root, cache_key_ref key) {
  temp_dir scratch;
  file_stream_program_cache cache(scratch.path(), fast());
  cache.put(key, code_of(1));
  auto files = entry_files(scratch.path());
  if (files.size() != 1) std::abort();
  return root / fs::relative(files[0], scratch.path());
}

inline struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) std::memset(&st, 0, sizeof st);
  return st;
}

inline std::int64_t ns(const timespec& t) {
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}
inline std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns(t);
}

// Sets a file's atime (and, optionally, its mtime) to `seconds_ago` before now.
inline void set_times(const fs::path& p, double atime_seconds_ago,
                      std::optional<double> mtime_seconds_ago = std::nullopt) {
  auto ago = [](double s) {
    const std::int64_t t = now_ns() - static_cast<std::int64_t>(s * 1e9);
    return timespec{static_cast<time_t>(t / 1'000'000'000), static_cast<long>(t % 1'000'000'000)};
  };
  timespec times[2] = {ago(atime_seconds_ago),
                       mtime_seconds_ago ? ago(*mtime_seconds_ago) : timespec{0, UTIME_OMIT}};
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << p;
}

// Installs test hooks while in scope.
class hooks_scope {
 public:
  explicit hooks_scope(const std::function<void(cucore::detail::file_stream_test_hooks&)>& set) {
    set(hooks_);
    cucore::detail::set_file_stream_test_hooks(&hooks_);
  }
  hooks_scope(const hooks_scope&) = delete;
  hooks_scope& operator=(const hooks_scope&) = delete;
  ~hooks_scope() { cucore::detail::set_file_stream_test_hooks(nullptr); }

 private:
  cucore::detail::file_stream_test_hooks hooks_;
};

// A cache (fast()) in a fresh directory holding `code` under "k", and the path of that entry.
struct one_entry {
  explicit one_entry(const object_code& code = code_of(10)) { cache.put("k", code); }
  temp_dir dir;
  file_stream_program_cache cache{dir.path(), fast()};
  fs::path file = entry_file(dir.path(), "k");
};

// While in scope, runs `action` when a cache is about to remove `file` (the before_remove hook):
// what a peer does at that moment of a race.
inline hooks_scope on_removing(const fs::path& file, std::function<void()> action) {
  return hooks_scope([file, action = std::move(action)](cucore::detail::file_stream_test_hooks& h) {
    h.before_remove = [file, action](const std::string& path) {
      if (path == file.string()) action();
    };
  });
}

// A cache of `cap` bytes in a fresh directory, and how many directory scans caches have made
// since (the on_scan hook, counted while this lives).
struct counted_scans {
  explicit counted_scans(std::uint64_t cap) : cache(dir.path(), fast(cap)) {}
  int scans = 0;
  hooks_scope hooks{
      [this](cucore::detail::file_stream_test_hooks& h) { h.on_scan = [this] { ++scans; }; }};
  temp_dir dir;
  file_stream_program_cache cache;
};

inline bool running_as_root() {
  return ::geteuid() == 0;
}

// Runs `body` in a forked child (run_in_child) that, when we are root, first drops to uid/gid
// 65534 (nobody), so that file modes apply to it.
inline std::string run_as_nobody(const std::function<std::string()>& body) {
  return run_in_child([&]() -> std::string {
    if (running_as_root()) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
        return "cannot drop privileges to nobody";
      }
    }
    return body();
  });
}

// Runs `body(root, file)` as nobody (run_as_nobody) and expects it to report nothing: `root` is
// a cache directory yet to be made in a fresh directory (handed to nobody when we are root), and
// `file` the path key "k"'s entry takes there.
inline void expect_as_nobody(
    const std::function<std::string(const fs::path& root, const fs::path& file)>& body) {
  temp_dir dir;
  const fs::path root = dir / "c";
  const fs::path file = entry_file(root, "k");
  if (running_as_root()) {
    ASSERT_EQ(::chown(dir.path().c_str(), 65534, 65534), 0);
  }
  EXPECT_EQ(run_as_nobody([&] { return body(root, file); }), "");
}

}  // namespace cucore::testing

// In a child's body: returns the failed condition, with its line, as the child's report.
#define CHILD_EXPECT(cond)                                                            \
  do {                                                                                \
    if (!(cond)) return std::string("line ") + std::to_string(__LINE__) + ": " #cond; \
  } while (0)
