// cucore::parse_cache_spec and open_program_cache's reading of a spec: every accepted form, schemes
// in any case, and the mistyped ones refused before anything is created (they once became local
// directories).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/open.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using cucore::cache_spec;
using cucore::cache_spec_error;
using cucore::parse_cache_spec;
using cucore::testing::contains;
using cucore::testing::temp_dir;
using kind = cucore::cache_spec::local_kind;

namespace {

// Runs the test in a fresh working directory (relative specs land there) with neither
// $CUCORE_REMOTE_CACHE nor the caller's $CUCORE_CACHE_DIR.
class CacheSpec : public ::testing::Test {
 protected:
  void SetUp() override {
    old_cwd_ = fs::current_path();
    fs::current_path(work_.path());
    save("CUCORE_REMOTE_CACHE", remote_);
    save("CUCORE_CACHE_DIR", cache_dir_);
    ::setenv("CUCORE_CACHE_DIR", (work_.path() / "default").c_str(), 1);
  }
  void TearDown() override {
    fs::current_path(old_cwd_);
    restore("CUCORE_REMOTE_CACHE", remote_);
    restore("CUCORE_CACHE_DIR", cache_dir_);
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(work_.path())) {
      out.push_back(fs::relative(e.path(), work_.path()).string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  temp_dir work_;

 private:
  static void save(const char* name, std::optional<std::string>& slot) {
    if (const char* v = std::getenv(name)) slot = v;
    ::unsetenv(name);
  }
  static void restore(const char* name, const std::optional<std::string>& slot) {
    if (slot) {
      ::setenv(name, slot->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  fs::path old_cwd_;
  std::optional<std::string> remote_, cache_dir_;
};

struct accepted {
  const char* spec;
  kind local;
  const char* path;    // "" for none
  const char* remote;  // nullptr for none
};

TEST_F(CacheSpec, EveryDocumentedFormAndSchemesInAnyCase) {
  const accepted cases[] = {
      {"", kind::default_directory, "", nullptr},
      {"cache", kind::directory, "cache", nullptr},
      {"/abs/cache", kind::directory, "/abs/cache", nullptr},
      {"./a:b", kind::directory, "./a:b", nullptr},
      {"/abs/x:y", kind::directory, "/abs/x:y", nullptr},
      {"sub/v1:x", kind::directory, "sub/v1:x", nullptr},
      {"my_cache:1", kind::directory, "my_cache:1", nullptr},  // '_' is no scheme character
      {"1x:y", kind::directory, "1x:y", nullptr},              // a scheme starts with a letter
      {"dir:name", kind::directory, "name", nullptr},
      {"dir:a:b", kind::directory, "a:b", nullptr},
      {"dir:memory", kind::directory, "memory", nullptr},
      {"DIR:/abs", kind::directory, "/abs", nullptr},
      {"dir:///abs", kind::directory, "/abs", nullptr},
      {"sqlite:k.db", kind::sqlite, "k.db", nullptr},
      {"sqlite:cache/k.db", kind::sqlite, "cache/k.db", nullptr},
      {"SQLite:/tmp/k.db", kind::sqlite, "/tmp/k.db", nullptr},
      {"sqlite:///abs/k.db", kind::sqlite, "/abs/k.db", nullptr},
      {"sqlite:a:b.db", kind::sqlite, "a:b.db", nullptr},
      {"memory", kind::memory, "", nullptr},
      {"MEMORY", kind::memory, "", nullptr},
      {"none", kind::none, "", nullptr},
      {"None", kind::none, "", nullptr},
      {"off", kind::none, "", nullptr},
      {"OFF", kind::none, "", nullptr},
      {"redis://127.0.0.1:6379/0", kind::none, "", "redis://127.0.0.1:6379/0"},
      {"REDIS://127.0.0.1:6379/0", kind::none, "", "redis://127.0.0.1:6379/0"},
      {"Redis://:p+w@h", kind::none, "", "redis://:p+w@h"},
      {"dir:/x+redis://h/2", kind::directory, "/x", "redis://h/2"},
      {"dir:/x+REDIS://h/2", kind::directory, "/x", "redis://h/2"},
      {"cache+redis://h", kind::directory, "cache", "redis://h"},
      {"sqlite:/tmp/k.db+redis://:pw@10.0.0.5", kind::sqlite, "/tmp/k.db", "redis://:pw@10.0.0.5"},
      {"memory+Redis://h", kind::memory, "", "redis://h"},
      {"+redis://h", kind::default_directory, "", "redis://h"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.spec);
    const cache_spec s = parse_cache_spec(c.spec);
    EXPECT_EQ(s.local, c.local);
    EXPECT_EQ(s.path, fs::path(c.path));
    EXPECT_EQ(s.remote.has_value(), c.remote != nullptr);
    if (s.remote && c.remote) {
      EXPECT_EQ(*s.remote, c.remote);
    }
    EXPECT_FALSE(s.remote_from_environment);
  }
  EXPECT_TRUE(names().empty()) << "parsing creates nothing";
}

TEST_F(CacheSpec, MistypedSpecsAreRefusedAndCreateNothing) {
  const bool had_root_file = fs::exists("/cucore-spec-test.db");  // sqlite:// made it
  const char* refused[] = {
      "sqlite:",
      "dir:",
      "redis:/127.0.0.1:6379/0",
      "REDIS:127.0.0.1",
      "redis:",
      "bogus://x",
      "sqlite3:k.db",
      "memory:",
      "none:",
      "OFF:x",
      "sqlite://cucore-spec-test.db",
      "SQLITE://cucore-spec-test.db",
      "dir://cucore-spec-test",
      "C:\\cache",
      "c:/cache",
      "file:///tmp/x",
      "rediss://h",
      "redis://h:port",
      "redis://",
      "dir:d+redis:/host",
      "d+REDISS://h",
      "none+redis://h",
      "off+redis://h",
      "bogus:x+redis://h",
      "memory:+redis://h",
  };
  for (const char* spec : refused) {
    SCOPED_TRACE(spec);
    EXPECT_THROW((void)parse_cache_spec(spec), cache_spec_error);
    EXPECT_THROW((void)cucore::open_program_cache(spec), cache_spec_error);
    try {
      (void)cucore::open_program_cache(spec);
    } catch (const cucore::invalid_argument& e) {  // what callers already catch
      EXPECT_TRUE(e.what() != std::string()) << spec;
    }
  }
  EXPECT_TRUE(names().empty()) << "a refused spec creates nothing";
  if (!had_root_file) {
    EXPECT_FALSE(fs::exists("/cucore-spec-test.db"));
  }
}

TEST_F(CacheSpec, MessagesNameTheSchemeTheFormsAndTheEscape) {
  auto message = [](const char* spec) -> std::string {
    try {
      (void)parse_cache_spec(spec);
    } catch (const cache_spec_error& e) {
      EXPECT_EQ(e.spec(), spec);
      EXPECT_TRUE(e.variable().empty());
      EXPECT_TRUE(contains(e.what(), e.reason()));
      return e.what();
    }
    ADD_FAILURE() << spec << " was accepted";
    return {};
  };
  std::string m = message("bogus://x");
  EXPECT_TRUE(contains(m, "cache spec \"bogus://x\": \"bogus:\" is not a cache scheme")) << m;
  for (const char* form : {"dir:DIR", "sqlite:FILE", "memory", "none", "redis://", "any case"}) {
    EXPECT_TRUE(contains(m, form)) << form << " missing from " << m;
  }
  EXPECT_TRUE(contains(m, "./bogus://x or dir:bogus://x")) << m;
  // What the other refusals say: a spec, and a part of its message.
  const std::pair<const char*, const char*> says[] = {
      {"sqlite://dir/k.db", "would make \"dir/k.db\" a host name"},
      {"sqlite://dir/k.db", "write sqlite:dir/k.db"},
      {"sqlite://dir/k.db", "sqlite:///ABS/PATH"},
      {"redis:/h", "redis://HOST"},
      {"memory:", "write memory alone"},
      {"C:\\cache", "drive letter"},
      {"sqlite:", "names no file"},
  };
  for (const auto& [spec, part] : says) {
    m = message(spec);
    EXPECT_TRUE(contains(m, part)) << m;
  }

  // A password is never echoed.
  for (const char* spec : {"dir:d+redis://:hunter2@h:bad", "redis://u:hunter2@h:bad",
                           "bogus:x+redis://:hunter2@h", "none+redis://:hunter2@h"}) {
    try {
      (void)parse_cache_spec(spec);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const cache_spec_error& e) {
      EXPECT_FALSE(contains(e.what(), "hunter2")) << e.what();
      EXPECT_FALSE(contains(e.spec(), "hunter2")) << e.spec();
    }
  }
}

TEST_F(CacheSpec, RemoteCacheVariable) {
  ::setenv("CUCORE_REMOTE_CACHE", "REDIS://127.0.0.1:1/0", 1);
  cache_spec s = parse_cache_spec("");
  EXPECT_EQ(s.local, kind::default_directory);
  ASSERT_TRUE(s.remote);
  EXPECT_EQ(*s.remote, "redis://127.0.0.1:1/0");
  EXPECT_TRUE(s.remote_from_environment);
  // An explicit spec is taken as given.
  s = parse_cache_spec("memory");
  EXPECT_FALSE(s.remote);
  for (const char* bad : {"bogus://x", "redis:/h", "redis://h:port", "rediss://h", "/srv/cache"}) {
    SCOPED_TRACE(bad);
    ::setenv("CUCORE_REMOTE_CACHE", bad, 1);
    try {
      (void)parse_cache_spec("");
      ADD_FAILURE() << "accepted";
    } catch (const cache_spec_error& e) {
      EXPECT_EQ(e.variable(), "CUCORE_REMOTE_CACHE");
      EXPECT_TRUE(contains(e.what(), "$CUCORE_REMOTE_CACHE")) << e.what();
    }
    EXPECT_THROW((void)cucore::open_program_cache(""), cache_spec_error);
    EXPECT_NO_THROW((void)parse_cache_spec("none"));
  }
  EXPECT_TRUE(names().empty());
}

// $CUCORE_CACHE_DIR is a path: a spec put there (redis://host) is refused, not made a directory.
TEST_F(CacheSpec, CacheDirVariableThatReadsAsASchemeIsRefused) {
  for (const char* bad : {"redis://127.0.0.1:6379/0", "REDIS://h", "sqlite:k.db", "dir:d", "C:x"}) {
    SCOPED_TRACE(bad);
    ::setenv("CUCORE_CACHE_DIR", bad, 1);
    try {
      (void)cucore::default_cache_dir();
      ADD_FAILURE() << "accepted";
    } catch (const cache_spec_error& e) {
      EXPECT_EQ(e.variable(), "CUCORE_CACHE_DIR");
      EXPECT_TRUE(contains(e.what(), "$CUCORE_REMOTE_CACHE")) << e.what();
      EXPECT_TRUE(contains(e.what(), "./NAME")) << e.what();
    }
    EXPECT_THROW((void)cucore::open_program_cache(""), cache_spec_error);
  }
  // Paths with a colon later on, or that start otherwise, stay directories.
  for (const char* good : {"./redis:x", "cache_1:2", "/abs/x:y", "sub/v1:x"}) {
    ::setenv("CUCORE_CACHE_DIR", good, 1);
    EXPECT_EQ(cucore::default_cache_dir(), std::filesystem::path(good));
  }
  EXPECT_TRUE(names().empty());
}

TEST_F(CacheSpec, OpensWhatItParses) {
  EXPECT_EQ(cucore::open_program_cache("NONE"), nullptr);
  EXPECT_NE(
      dynamic_cast<cucore::in_memory_program_cache*>(cucore::open_program_cache("Memory").get()),
      nullptr);
  EXPECT_NE(
      dynamic_cast<cucore::file_stream_program_cache*>(cucore::open_program_cache("./a:b").get()),
      nullptr);
  EXPECT_TRUE(fs::is_directory(work_.path() / "a:b"));
  EXPECT_NE(
      dynamic_cast<cucore::file_stream_program_cache*>(cucore::open_program_cache("dir:c:d").get()),
      nullptr);
  EXPECT_TRUE(fs::is_directory(work_.path() / "c:d"));
  const std::string db = (work_.path() / "abs.db").string();
  EXPECT_NE(dynamic_cast<cucore::sqlite_program_cache*>(
                cucore::open_program_cache("SQLITE://" + db).get()),
            nullptr);
  EXPECT_TRUE(fs::is_regular_file(db));
  // A Redis cache opens without connecting (nothing listens on port 1): no REDIS: directory.
  auto redis = cucore::open_program_cache("REDIS://127.0.0.1:1/0");
  EXPECT_NE(dynamic_cast<cucore::redis_program_cache*>(redis.get()), nullptr);
  auto tiered = cucore::open_program_cache("MEMORY+REDIS://127.0.0.1:1/0");
  EXPECT_NE(dynamic_cast<cucore::tiered_program_cache*>(tiered.get()), nullptr);
  EXPECT_FALSE(fs::exists(work_.path() / "REDIS:"));
  EXPECT_FALSE(fs::exists(work_.path() / "MEMORY+REDIS:"));
}

}  // namespace
