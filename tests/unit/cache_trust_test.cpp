// The trust model of the local caches (cache_access): a cache that another user owns or can
// write is refused, an entry another user planted is a miss, and a cache shared on purpose (a
// group, shared mode) is shared. Real Unix users: the test creates a group and two users with
// groupadd/useradd and runs their side in forked children that setgid/setuid to them (skipped
// where that is impossible: not root, no useradd). Also the persistent settings (cucore.conf).
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "cucore/cache/config.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/open.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::log_capture;
using testing::run_in_child;
using testing::temp_dir;

constexpr const char* kSource = R"(
extern "C" __global__ void trust_scale(float* x, float a) { x[threadIdx.x] *= a; }
)";

program_options compile_options() {
  program_options o;
  o.arch = testing::kArch;
  return o;
}

// A real compile of kSource, through `cache` when given.
object_code compile_with(program_cache* cache = nullptr) {
  const std::vector<std::string> names = {"trust_scale"};
  program p(kSource, source_type::cxx, compile_options());
  return cache != nullptr ? p.compile(code_type::cubin, names, cache)
                          : p.compile(code_type::cubin, names);
}

object_code code_of(std::size_t n, const std::string& name = "c") {
  return object_code(code_type::cubin, std::vector<std::byte>(n, std::byte{7}), name);
}

file_stream_cache_options dir_options(cache_access access = cache_access::private_to_user) {
  file_stream_cache_options o;
  o.fsync = false;
  o.access = access;
  return o;
}

sqlite_cache_options db_options(cache_access access = cache_access::private_to_user) {
  sqlite_cache_options o;
  o.access = access;
  return o;
}

bool run_quietly(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// A throwaway group with two member users, removed at the end. useradd takes a lock on
// /etc/passwd that parallel tests may hold: retried.
class test_users {
 public:
  test_users() {
    if (::geteuid() != 0) {
      why_not_ = "needs root to create users";
      return;
    }
    const std::string tag = std::to_string(::getpid());
    group_ = "cucoretg" + tag;
    user_a_ = "cucoreta" + tag;
    user_b_ = "cucoretb" + tag;
    auto retry = [](const std::string& command) {
      for (int i = 0; i < 20; ++i) {
        if (run_quietly(command)) return true;
        ::usleep(100'000);
      }
      return false;
    };
    if (!retry("groupadd " + group_)) {
      why_not_ = "groupadd failed (no shadow utilities?)";
      group_.clear();
      return;
    }
    for (std::string* user : {&user_a_, &user_b_}) {
      if (!retry("useradd -M -N -s /usr/sbin/nologin -g " + group_ + " " + *user)) {
        why_not_ = "useradd failed";
        user->clear();
        return;
      }
    }
    const passwd* a = ::getpwnam(user_a_.c_str());
    if (a == nullptr) {
      why_not_ = "created user not found";
      return;
    }
    uid_a_ = a->pw_uid;
    gid_ = a->pw_gid;
    const passwd* b = ::getpwnam(user_b_.c_str());
    if (b == nullptr) {
      why_not_ = "created user not found";
      return;
    }
    uid_b_ = b->pw_uid;
  }
  ~test_users() {
    for (const std::string* user : {&user_a_, &user_b_}) {
      if (!user->empty()) run_quietly("userdel " + *user);
    }
    if (!group_.empty()) run_quietly("groupdel " + group_);
  }
  test_users(const test_users&) = delete;
  test_users& operator=(const test_users&) = delete;

  // Empty when the users exist.
  const std::string& why_not() const { return why_not_; }
  uid_t a() const { return uid_a_; }
  uid_t b() const { return uid_b_; }
  gid_t group() const { return gid_; }

  // Runs `body` in a forked child as `uid` (in the test group only).
  std::string run_as(uid_t uid, const std::function<std::string()>& body) const {
    return run_in_child([&]() -> std::string {
      if (::setgroups(1, &gid_) != 0 || ::setgid(gid_) != 0 || ::setuid(uid) != 0) {
        return "cannot become uid " + std::to_string(uid);
      }
      return body();
    });
  }

 private:
  std::string why_not_, group_, user_a_, user_b_;
  uid_t uid_a_ = 0, uid_b_ = 0;
  gid_t gid_ = 0;
};

#define CHILD_EXPECT(cond)                                                            \
  do {                                                                                \
    if (!(cond)) return std::string("line ") + std::to_string(__LINE__) + ": " #cond; \
  } while (0)

#define NEED_USERS(users) \
  if (!(users).why_not().empty()) GTEST_SKIP() << (users).why_not()

// A temp directory the test users can reach.
struct reachable_dir {
  temp_dir dir;
  reachable_dir() { ::chmod(dir.path().c_str(), 0755); }
  fs::path operator/(const std::string& name) const { return dir / name; }
};

// Every file under `root` with its size, mode, owner and times: what "no data touched" means.
// (Directories' access times are left out: listing them, as this does, sets them.)
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& p : fs::recursive_directory_iterator(root)) {
    struct stat st {};
    ::lstat(p.path().c_str(), &st);
    std::string& line = out[p.path().string()];
    line = std::to_string(st.st_size) + " " + std::to_string(st.st_mode) + " " +
           std::to_string(st.st_uid) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec);
    if (!S_ISDIR(st.st_mode)) {
      line += " " + std::to_string(st.st_atim.tv_sec) + "." + std::to_string(st.st_atim.tv_nsec);
    }
  }
  return out;
}

std::string refusal_of(const std::function<void()>& open) {
  try {
    open();
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// -------------------------------------------------------------------------------------------
// Directory cache

TEST(CacheTrust, DirectoryOwnedByAnotherUserIsRefused) {
  test_users users;
  NEED_USERS(users);
  reachable_dir dir;
  const fs::path root = dir / "theirs";
  fs::create_directory(root);
  ASSERT_EQ(::chown(root.c_str(), users.a(), users.group()), 0);
  ASSERT_EQ(users.run_as(users.a(),
                         [&]() -> std::string {
                           file_stream_program_cache cache(root, dir_options());
                           cache.put("k", code_of(64, "planted"));
                           CHILD_EXPECT(cache.get("k"));
                           return "";
                         }),
            "");
  const auto before = snapshot(root);
  // Root reading user A's cache: A could have planted anything.
  const std::string why = refusal_of([&] { file_stream_program_cache(root, dir_options()); });
  EXPECT_TRUE(contains(why, "belongs to another user")) << why;
  EXPECT_TRUE(contains(why, "CUCORE_CACHE_SHARED")) << why;
  EXPECT_FALSE(refusal_of([&] { open_program_cache(root.string()); }).empty());
  // And user B, in the same group, without opting in.
  EXPECT_EQ(users.run_as(users.b(),
                         [&]() -> std::string {
                           CHILD_EXPECT(!refusal_of([&] {
                                           file_stream_program_cache(root, dir_options());
                                         }).empty());
                           return "";
                         }),
            "");
  EXPECT_EQ(snapshot(root), before) << "nothing read, written or touched";
}

TEST(CacheTrust, WorldAndGroupWritableDirectories) {
  temp_dir dir;
  const fs::path root = dir / "c";
  {
    file_stream_program_cache cache(root, dir_options());
    cache.put("k", code_of(8));
  }
  ASSERT_EQ(::chmod(root.c_str(), 0777), 0);
  std::string why = refusal_of([&] { file_stream_program_cache(root, dir_options()); });
  EXPECT_TRUE(contains(why, "world-writable")) << why;
  why = refusal_of([&] { file_stream_program_cache(root, dir_options(cache_access::shared)); });
  EXPECT_TRUE(contains(why, "world-writable")) << "not even shared: " << why;
  ASSERT_EQ(::chmod(root.c_str(), 01777), 0);  // the sticky bit does not make it private
  EXPECT_FALSE(refusal_of([&] { file_stream_program_cache(root, dir_options()); }).empty());

  ASSERT_EQ(::chmod(root.c_str(), 0775), 0);
  why = refusal_of([&] { file_stream_program_cache(root, dir_options()); });
  EXPECT_TRUE(contains(why, "group-writable")) << why;
  EXPECT_TRUE(contains(why, "chmod g-w")) << why;
  file_stream_program_cache shared(root, dir_options(cache_access::shared));
  EXPECT_TRUE(shared.get("k"));

  ASSERT_EQ(::chmod(root.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((root / "entries").c_str(), 0777), 0);
  why = refusal_of([&] { file_stream_program_cache(root, dir_options()); });
  EXPECT_TRUE(contains(why, "entries")) << why;
}

TEST(CacheTrust, PrivateCacheIsCreatedWithoutGroupWriteWhateverTheUmask) {
  temp_dir dir;
  const mode_t old = ::umask(002);
  {
    file_stream_program_cache cache(dir / "c", dir_options());
    cache.put("k", code_of(8));
  }
  ::umask(old);
  for (const auto& p : fs::recursive_directory_iterator(dir / "c")) {
    struct stat st {};
    ::lstat(p.path().c_str(), &st);
    EXPECT_EQ(st.st_mode & 022, 0u) << p.path();
  }
  EXPECT_NO_THROW(file_stream_program_cache(dir / "c", dir_options()));  // reopens its own cache
}

TEST(CacheTrust, SharedModeSharesAGroupCacheBetweenUsers) {
  test_users users;
  NEED_USERS(users);
  reachable_dir dir;
  const fs::path root = dir / "shared";
  fs::create_directory(root);
  ASSERT_EQ(::chown(root.c_str(), users.a(), users.group()), 0);
  ASSERT_EQ(::chmod(root.c_str(), 02770), 0);  // the group's, set-group-ID: as ccache advises

  // The oracle: an uncached compile of the same program.
  const object_code uncached = compile_with();

  // A compiles through the shared cache (opted in through the environment).
  ASSERT_EQ(users.run_as(users.a(),
                         [&]() -> std::string {
                           ::setenv("CUCORE_CACHE_SHARED", "1", 1);
                           auto cache = open_program_cache("dir:" + root.string());
                           compile_with(cache.get());
                           CHILD_EXPECT(cache->stats().puts == 1);
                           return "";
                         }),
            "");
  // B, another member of the group: a hit, and the bytes of an uncached compile.
  EXPECT_EQ(users.run_as(users.b(),
                         [&]() -> std::string {
                           open_cache_options shared;
                           shared.shared = true;
                           auto cache = open_program_cache("dir:" + root.string(), shared);
                           const object_code hit = compile_with(cache.get());
                           CHILD_EXPECT(cache->stats().hits == 1);
                           CHILD_EXPECT(cache->stats().misses == 0);
                           CHILD_EXPECT(std::equal(hit.code().begin(), hit.code().end(),
                                                   uncached.code().begin(), uncached.code().end()));
                           // B can write into the shard directories A created, and A reads it.
                           cache->put("from-b", code_of(32, "b"));
                           CHILD_EXPECT(cache->stats().errors == 0);
                           // Without opting in, B refuses A's cache.
                           CHILD_EXPECT(!refusal_of([&] {
                                           open_program_cache("dir:" + root.string(), {});
                                         }).empty());
                           return "";
                         }),
            "");
  EXPECT_EQ(users.run_as(users.a(),
                         [&]() -> std::string {
                           file_stream_program_cache cache(root, dir_options(cache_access::shared));
                           auto b = cache.get("from-b");
                           CHILD_EXPECT(b && b->name() == "b");
                           return "";
                         }),
            "");
  // What A created is the group's (umask 002) and nobody else's.
  for (const auto& p : fs::recursive_directory_iterator(root)) {
    struct stat st {};
    ::lstat(p.path().c_str(), &st);
    EXPECT_EQ(st.st_mode & S_IWOTH, 0u) << p.path();
    if (S_ISDIR(st.st_mode)) {
      EXPECT_NE(st.st_mode & S_IWGRP, 0u) << p.path();
    }
  }
  // The compiler version memo too, so that B's hits load no compiler either.
  struct stat memo {};
  ASSERT_EQ(::stat((root / "compiler-versions").c_str(), &memo), 0);
  EXPECT_NE(memo.st_mode & S_IRGRP, 0u);
}

TEST(CacheTrust, EntryPlantedByAnotherUserIsAMiss) {
  test_users users;
  NEED_USERS(users);
  reachable_dir dir;
  const fs::path root = dir / "mine";
  fs::path entry;
  {
    file_stream_program_cache cache(root, dir_options());
    cache.put("k", code_of(64, "genuine"));
  }
  for (const auto& p : fs::recursive_directory_iterator(root / "entries")) {
    if (p.is_regular_file()) entry = p.path();
  }
  ASSERT_FALSE(entry.empty());
  // User A plants an entry (a well-formed one: the checksum is no signature) through a shard
  // directory that was left writable, which is then closed again.
  const fs::path shard = entry.parent_path();
  ASSERT_EQ(::chmod(shard.c_str(), 0777), 0);
  ASSERT_EQ(users.run_as(users.a(),
                         [&]() -> std::string {
                           temp_dir scratch;
                           {
                             file_stream_program_cache mine(scratch.path(), dir_options());
                             mine.put("k", code_of(64, "planted"));
                           }
                           fs::path made;
                           for (const auto& p :
                                fs::recursive_directory_iterator(scratch.path() / "entries")) {
                             if (p.is_regular_file()) made = p.path();
                           }
                           CHILD_EXPECT(!made.empty());
                           CHILD_EXPECT(::rename(made.c_str(), entry.c_str()) == 0);
                           return "";
                         }),
            "");
  ASSERT_EQ(::chmod(shard.c_str(), 0755), 0);
  struct stat st {};
  ASSERT_EQ(::lstat(entry.c_str(), &st), 0);
  ASSERT_EQ(st.st_uid, users.a());

  log_capture logs;
  file_stream_program_cache cache(root, dir_options());
  EXPECT_FALSE(cache.get("k")) << "loaded code another user planted";
  EXPECT_EQ(logs.warnings("belongs to another user"), 1u) << logs.all();
  EXPECT_TRUE(fs::exists(entry)) << "left for verify() and the next put";
  const cache_verify_report report = cache.verify(/*remove_bad=*/false);
  EXPECT_EQ(report.corrupt, 1u);
  // Shared mode trusts it (that is what shared means), unless everybody could have written it.
  file_stream_program_cache shared(root, dir_options(cache_access::shared));
  auto hit = shared.get("k");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name(), "planted");
  ASSERT_EQ(::chmod(entry.c_str(), 0666), 0);
  EXPECT_FALSE(shared.get("k"));
  // A put replaces it with our own.
  cache.put("k", code_of(64, "genuine"));
  auto own = cache.get("k");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->name(), "genuine");
}

// -------------------------------------------------------------------------------------------
// SQLite cache

TEST(CacheTrust, SqliteFileOwnedByAnotherUserIsRefused) {
  test_users users;
  NEED_USERS(users);
  reachable_dir dir;
  fs::create_directory(dir / "s");
  ASSERT_EQ(::chown((dir / "s").c_str(), users.a(), users.group()), 0);
  const fs::path file = dir / "s/c.db";
  ASSERT_EQ(users.run_as(users.a(),
                         [&]() -> std::string {
                           sqlite_program_cache cache(file, db_options());
                           cache.put("k", code_of(64, "planted"));
                           CHILD_EXPECT(cache.get("k"));
                           return "";
                         }),
            "");
  const auto before = snapshot(dir / "s");
  std::string why = refusal_of([&] { sqlite_program_cache(file, db_options()); });
  EXPECT_TRUE(contains(why, "belongs to another user")) << why;
  EXPECT_FALSE(refusal_of([&] { open_program_cache("sqlite:" + file.string()); }).empty());
  EXPECT_EQ(snapshot(dir / "s"), before);

  // The directory is ours, the file theirs: refused too.
  ASSERT_EQ(::chown((dir / "s").c_str(), 0, 0), 0);
  why = refusal_of([&] { sqlite_program_cache(file, db_options()); });
  EXPECT_TRUE(contains(why, "SQLite cache file")) << why;
}

TEST(CacheTrust, SqliteSideFilesAndDirectoryModes) {
  test_users users;
  NEED_USERS(users);
  temp_dir dir;
  const fs::path file = dir / "c.db";
  {
    sqlite_program_cache cache(file, db_options());
    cache.put("k", code_of(8));
  }
  // A journal another user planted beside the database would be replayed into it.
  { std::ofstream(dir / "c.db-journal") << "x"; }
  ASSERT_EQ(::chown((dir / "c.db-journal").c_str(), users.a(), users.group()), 0);
  std::string why = refusal_of([&] { sqlite_program_cache(file, db_options()); });
  EXPECT_TRUE(contains(why, "c.db-journal")) << why;
  fs::remove(dir / "c.db-journal");

  ASSERT_EQ(::chmod(file.c_str(), 0664), 0);
  why = refusal_of([&] { sqlite_program_cache(file, db_options()); });
  EXPECT_TRUE(contains(why, "group-writable")) << why;
  {
    sqlite_program_cache shared(file, db_options(cache_access::shared));
    EXPECT_TRUE(shared.get("k"));
  }
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  why = refusal_of([&] { sqlite_program_cache(file, db_options(cache_access::shared)); });
  EXPECT_TRUE(contains(why, "world-writable")) << why;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);
  sqlite_program_cache own(file, db_options());
  EXPECT_TRUE(own.get("k"));
}

TEST(CacheTrust, SqliteSharedModeSharesAGroupCache) {
  test_users users;
  NEED_USERS(users);
  reachable_dir dir;
  fs::create_directory(dir / "s");
  ASSERT_EQ(::chown((dir / "s").c_str(), users.a(), users.group()), 0);
  ASSERT_EQ(::chmod((dir / "s").c_str(), 02770), 0);
  const fs::path file = dir / "s/c.db";
  const object_code uncached = compile_with();
  ASSERT_EQ(users.run_as(users.a(),
                         [&]() -> std::string {
                           sqlite_program_cache cache(file, db_options(cache_access::shared));
                           compile_with(&cache);
                           CHILD_EXPECT(cache.stats().puts == 1);
                           return "";
                         }),
            "");
  EXPECT_EQ(users.run_as(users.b(),
                         [&]() -> std::string {
                           CHILD_EXPECT(!refusal_of([&] {
                                           sqlite_program_cache(file, db_options());
                                         }).empty());
                           sqlite_program_cache cache(file, db_options(cache_access::shared));
                           const object_code hit = compile_with(&cache);
                           CHILD_EXPECT(cache.stats().hits == 1);
                           CHILD_EXPECT(std::equal(hit.code().begin(), hit.code().end(),
                                                   uncached.code().begin(), uncached.code().end()));
                           cache.put("from-b", code_of(16, "b"));  // B can write it too
                           CHILD_EXPECT(cache.stats().errors == 0);
                           CHILD_EXPECT(cache.get("from-b"));
                           return "";
                         }),
            "");
}

// -------------------------------------------------------------------------------------------
// cucore.conf

TEST(CacheConfig, SetReadBackAndSurviveTheProcess) {
  temp_dir dir;
  const fs::path root = dir / "c";
  EXPECT_FALSE(read_cache_config(root).max_size);  // no file, no directory: all unset
  write_cache_config(root, "max_size", "64K");
  write_cache_config(root, "umask", "027");
  write_cache_config(root, "max_size", "128K");  // replaces its line
  EXPECT_EQ(run_in_child([&]() -> std::string {
              const cache_config c = read_cache_config(root);
              CHILD_EXPECT(c.max_size == std::uint64_t{128} << 10);
              CHILD_EXPECT(c.umask == 027u);
              CHILD_EXPECT(!c.shared);
              return "";
            }),
            "");
  std::ifstream in(root / "cucore.conf");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "max_size = 128K\numask = 027\n");
  write_cache_config(root, "umask", std::nullopt);
  EXPECT_FALSE(read_cache_config(root).umask);
  EXPECT_EQ(format_cache_size(default_cache_max_size), "5G");
}

TEST(CacheConfig, MalformedLinesNameTheFileAndLine) {
  temp_dir dir;
  const fs::path conf = dir / "cucore.conf";
  auto error_of = [&](const std::string& text) {
    { std::ofstream(conf) << text; }
    return refusal_of([&] { read_cache_config(dir.path()); });
  };
  std::string why = error_of("# settings\nmax_size = 5X\n");
  EXPECT_TRUE(contains(why, conf.string() + ":2:")) << why;
  EXPECT_TRUE(contains(why, "unknown unit")) << why;
  why = error_of("max_size 5G\n");
  EXPECT_TRUE(contains(why, ":1: expected \"key = value\"")) << why;
  why = error_of("\nsize = 5G\n");
  EXPECT_TRUE(contains(why, ":2: unknown key \"size\"")) << why;
  why = error_of("shared = maybe\n");
  EXPECT_TRUE(contains(why, "not true or false")) << why;
  why = error_of("umask = 999\n");
  EXPECT_TRUE(contains(why, "not a umask")) << why;
  EXPECT_THROW(write_cache_config(dir.path(), "max_size", "lots"), invalid_argument);
  EXPECT_THROW(write_cache_config(dir.path(), "colour", "blue"), invalid_argument);
  // open_program_cache reports it too, rather than ignoring the file.
  { std::ofstream(conf) << "max_size = -1\n"; }
  EXPECT_THROW(open_program_cache("dir:" + dir.path().string()), invalid_argument);
}

TEST(CacheConfig, SmallCapIsEnforcedByTrimming) {
  temp_dir dir;
  const fs::path root = dir / "c";
  write_cache_config(root, "max_size", "64K");
  auto cache = open_program_cache("dir:" + root.string());
  for (int i = 0; i < 32; ++i) cache->put("key" + std::to_string(i), code_of(4096));
  EXPECT_LE(cache->size_bytes(), std::uint64_t{64} << 10);
  EXPECT_GT(cache->size(), 0u);
  EXPECT_TRUE(cache->get("key31")) << "the most recent entry stays";
  // The environment overrides the file.
  ::setenv("CUCORE_CACHE_MAX_SIZE", "16K", 1);
  auto smaller = open_program_cache("dir:" + root.string());
  ::unsetenv("CUCORE_CACHE_MAX_SIZE");
  smaller->put("one-more", code_of(4096));
  EXPECT_LE(smaller->size_bytes(), std::uint64_t{16} << 10);
}

TEST(CacheConfig, SharedIsHonouredOnlyFromYourOwnFile) {
  test_users users;
  NEED_USERS(users);
  temp_dir dir;
  write_cache_config(dir.path(), "shared", "true");
  EXPECT_EQ(read_cache_config(dir.path()).shared, true);
  // A file of another user: refused in private mode, and its `shared` ignored in shared mode.
  ASSERT_EQ(::chown((dir / "cucore.conf").c_str(), users.a(), users.group()), 0);
  const std::string why = refusal_of([&] { read_cache_config(dir.path()); });
  EXPECT_TRUE(contains(why, "belongs to another user")) << why;
  EXPECT_FALSE(read_cache_config(dir.path(), cache_access::shared).shared);
}

TEST(CacheConfig, SharedSettingOpensTheCacheShared) {
  temp_dir dir;
  const fs::path root = dir / "c";
  write_cache_config(root, "shared", "true");
  ASSERT_EQ(::chmod(root.c_str(), 0775), 0);
  EXPECT_NO_THROW(open_program_cache("dir:" + root.string()));
  ::setenv("CUCORE_CACHE_SHARED", "0", 1);  // the environment overrides the file
  EXPECT_THROW(open_program_cache("dir:" + root.string()), invalid_argument);
  ::setenv("CUCORE_CACHE_SHARED", "perhaps", 1);
  const std::string why = refusal_of([&] { open_program_cache("dir:" + root.string()); });
  ::unsetenv("CUCORE_CACHE_SHARED");
  EXPECT_TRUE(contains(why, "CUCORE_CACHE_SHARED")) << why;
}

}  // namespace
}  // namespace cucore
