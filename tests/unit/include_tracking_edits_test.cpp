// Include tracking end to end: the reused walk sees every edit made after it, a cubin through a
// directory cache, and no store across a change made while NVRTC reads
// (include_tracking_test_support.hpp).
#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "include_tracking_test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace include_tracking_testing;  // include_tracking_test_support.hpp
using include_tracking_testing::kernel;    // not cucore::kernel, the runtime's

// 16. The reused walk. Once every file of a closure has settled, a walk leaves a manifest of each
// path it stat'd; the next derivation re-stats them and, if each answers as before, reuses the
// closure without resolving anything. Each edit below happens after the manifest exists, and the
// next derivation must see it (a fresh walk, and the compiler's bytes through the cache).
TEST(IncludeTrackingScenario, ReusedWalkSeesEveryEditMadeAfterIt) {
  enum class edit {
    none,
    nested_edited,
    touched,
    shadowed,
    deleted,
    link_retargeted,
    moved_cwd,
    directory_created
  };
  struct setup {
    edit what;
    int value;  // VALUE before the edit
    temp_dir root;
    fs::path src, inc1, inc2;
    std::string code;
    program_options options;
    in_memory_program_cache cache;
    std::optional<program_cache_key> settled_key;
  };
  std::vector<std::unique_ptr<setup>> setups;
  int value = 16100;
  for (edit e : {edit::none, edit::nested_edited, edit::touched, edit::shadowed, edit::deleted,
                 edit::link_retargeted, edit::moved_cwd, edit::directory_created}) {
    auto s = std::make_unique<setup>();
    s->what = e;
    s->value = value;
    value += 100;
    // src/k.cu includes "local.cuh" beside it, which includes <nested.cuh> from -I inc2 (inc1 is
    // searched first: inc1/nested.cuh is an absent candidate).
    s->src = s->root / "src";
    s->inc1 = s->root / "inc1";
    s->inc2 = s->root / "inc2";
    fs::create_directories(s->src);
    fs::create_directories(s->inc1);
    fs::create_directories(s->inc2);
    write_text(s->src / "local.cuh", "#pragma once\n#include <nested.cuh>\n");
    if (e == edit::link_retargeted) {
      fs::create_directories(s->root / "real");
      write_text(s->root / "real" / "a.cuh", defines_value(s->value));
      write_text(s->root / "real" / "b.cuh", defines_value(s->value + 1));
      fs::create_symlink(s->root / "real" / "a.cuh", s->inc2 / "nested.cuh");
    } else {
      write_text(s->inc2 / "nested.cuh", defines_value(s->value));
    }
    s->code = kernel("#include \"local.cuh\"");
    s->options = named(s->src / "k.cu");
    s->options.include_path = {s->inc1.string(), s->inc2.string()};
    if (e == edit::moved_cwd) s->options.name = "k.cu";  // beside it: the current directory
    if (e == edit::directory_created) {                  // searched first, and not there yet
      s->options.include_path.insert(s->options.include_path.begin(), (s->root / "inc0").string());
    }
    setups.push_back(std::move(s));
  }
  // Runs `f` with the current directory set to the setup's source directory when it names its
  // program relative to it.
  struct in_directory {
    fs::path before = fs::current_path();
    explicit in_directory(const fs::path& dir) { fs::current_path(dir); }
    ~in_directory() { fs::current_path(before); }
  };
  const auto in_place = [](setup& s, const auto& f) {
    if (s.what == edit::moved_cwd) {
      in_directory cd(s.src);
      f();
    } else {
      f();
    }
  };

  for (auto& s : setups) {
    in_place(*s, [&] {
      const auto ptx = expect_compile(s->cache, s->code, s->options, cache_outcome::miss);
      EXPECT_TRUE(stores(ptx, s->value));
    });
  }
  // Every file settles: the next walk leaves a manifest, and the one after reuses it.
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  for (auto& s : setups) {
    SCOPED_TRACE("setup " + std::to_string(static_cast<int>(s->what)));
    in_place(*s, [&] {
      // (This one may already reuse a walk: where the compiles above ran slowly, as under TSan,
      // a setup's files had settled by its compile, whose walk then left the manifest.)
      s->settled_key = key_of(s->cache, s->code, s->options);
      const auto again = key_of(s->cache, s->code, s->options);
      EXPECT_EQ(again, *s->settled_key);
      EXPECT_TRUE(again.includes().reused_walk);
      EXPECT_EQ(again.includes().hashed, 0u);
      EXPECT_EQ(again.includes().files, 2u);
      // inc1/nested.cuh (<> skips the includer's directory), and inc0/nested.cuh
      EXPECT_EQ(again.includes().absent, s->what == edit::directory_created ? 2u : 1u);
    });
  }

  // The edits, each after its setup's manifest was made.
  temp_dir elsewhere;  // edit::moved_cwd: the same relative name in another directory
  for (auto& s : setups) {
    switch (s->what) {
      case edit::none:
        break;
      case edit::nested_edited:  // same size, another value
        write_text(s->inc2 / "nested.cuh", defines_value(s->value + 1));
        break;
      case edit::touched:  // rewritten with the same bytes: a new identity, the same key
        write_text(s->inc2 / "nested.cuh", defines_value(s->value));
        break;
      case edit::shadowed:  // a header appears where the walk found none
        write_text(s->inc1 / "nested.cuh", defines_value(s->value + 1));
        break;
      case edit::deleted:
        fs::remove(s->inc2 / "nested.cuh");
        break;
      case edit::link_retargeted: {
        const fs::path link = s->inc2 / "nested.cuh";
        fs::create_symlink(s->root / "real" / "b.cuh", s->inc2 / "nested.tmp");
        fs::rename(s->inc2 / "nested.tmp", link);
        break;
      }
      case edit::directory_created:  // an absent candidate's directory appears, with the header
        fs::create_directories(s->root / "inc0");
        write_text(s->root / "inc0" / "nested.cuh", defines_value(s->value + 1));
        break;
      case edit::moved_cwd:
        write_text(elsewhere / "local.cuh", defines_value(s->value + 1));
        s->src = elsewhere.path();
        break;
    }
  }

  for (auto& s : setups) {
    SCOPED_TRACE("edit " + std::to_string(static_cast<int>(s->what)));
    in_place(*s, [&] {
      const auto after = key_of(s->cache, s->code, s->options);
      if (s->what == edit::none) {
        EXPECT_TRUE(after.includes().reused_walk);
        EXPECT_EQ(after, *s->settled_key);
        expect_compile(s->cache, s->code, s->options, cache_outcome::hit);
        return;
      }
      EXPECT_FALSE(after.includes().reused_walk) << "a stat answered differently: walk again";
      if (s->what == edit::touched) {
        EXPECT_EQ(after, *s->settled_key);
        EXPECT_EQ(after.includes().hashed, 1u);
        expect_compile(s->cache, s->code, s->options, cache_outcome::hit);
        return;
      }
      EXPECT_NE(after, *s->settled_key);
      if (s->what == edit::deleted) {
        program p(s->code, source_type::cxx, s->options);
        EXPECT_THROW(p.compile(code_type::ptx, {}, &s->cache), compile_error);
        return;
      }
      const auto ptx = expect_compile(s->cache, s->code, s->options, cache_outcome::miss);
      EXPECT_TRUE(stores(ptx, s->value + 1)) << ptx.text();
    });
  }
}

// The cubin target through a directory cache: the same oracle.
TEST(IncludeTrackingScenario, CubinThroughADirectoryCache) {
  temp_dir src;
  temp_dir cache_dir;
  file_stream_program_cache cache(cache_dir / "cache");
  const fs::path file = src / "k.cu";
  write_text(src / "h.cuh", defines_value(17001));
  const std::string code = kernel("#include \"h.cuh\"\n#include <cuda/std/cstdint>");
  auto first = expect_compile(cache, code, named(file), cache_outcome::miss, code_type::cubin);
  expect_compile(cache, code, named(file), cache_outcome::hit, code_type::cubin);
  write_text(src / "h.cuh", defines_value(17002));
  auto edited = expect_compile(cache, code, named(file), cache_outcome::miss, code_type::cubin);
  EXPECT_FALSE(edited == first);
  {
    // Another cache object on the directory (its header digest memo read back from disk).
    file_stream_program_cache reopened(cache_dir / "cache");
    expect_compile(reopened, code, named(file), cache_outcome::hit, code_type::cubin);
  }
}

// ---------------------------------------------------------------------------------------------
// No store across a change (program_cache_key::check_store): a concurrent writer that acts at the
// moments NVRTC opens the headers (lease_writer.hpp: NVRTC's open waits in the kernel until the
// writer's action is done), so every interleaving below is the kernel's, not a sleep's.

// Arms a lease_writer when the compile looks the key up (after the key's walk, before NVRTC
// runs), and counts into the real cache's persistent statistics.
class writer_arming_cache final : public testing::forwarding_cache {
 public:
  writer_arming_cache(program_cache& inner, std::vector<testing::lease_writer::step> steps)
      : forwarding_cache(inner), inner_(inner), steps_(std::move(steps)) {}
  std::optional<object_code> get(cache_key_ref key) override {
    if (!writer) writer = std::make_unique<testing::lease_writer>(std::move(steps_));
    return forwarding_cache::get(key);
  }
  std::shared_ptr<cache_statistics> statistics() const override { return inner_.statistics(); }
  std::unique_ptr<testing::lease_writer> writer;

 private:
  program_cache& inner_;
  std::vector<testing::lease_writer::step> steps_;
};

std::uint64_t skips(const program_cache& cache, cache_skip_reason reason) {
  return cache.statistics()->read().skips[static_cast<std::size_t>(reason)];
}

// The header NVRTC reads first is emptied when NVRTC opens it (truncate: the first half of an
// editor's or git checkout's rewrite), and written back with the same bytes — and its old mtime —
// when NVRTC opens the next header, having read the first. NVRTC compiled the empty header; the
// header holds its old bytes again, so a key derived anew equals the first. The result is
// returned, but not stored: the header is not the file the key's walk saw (its ctime moved).
// Then the same with other contents of the same size (changed, and changed back).
TEST(NoStoreAcrossAChange, ConcurrentWriterWhileNvrtcReads) {
  const fs::path parent = testing::lease_parent();
  ASSERT_FALSE(parent.empty()) << "no file system here grants write leases (F_SETLEASE): set "
                                  "TMPDIR to an ext4, xfs, btrfs or tmpfs directory";
  temp_dir src(parent);
  temp_dir cache_dir;
  file_stream_program_cache cache(cache_dir / "cache");
  const fs::path file = src / "k.cu";
  const fs::path header = src / "h.cuh";
  const fs::path later = src / "later.cuh";
  const std::string original = defines_value(18001);
  write_text(later, "#pragma once\n");
  // VALUE falls back to 18009 when the header defines none (NVRTC read it empty).
  const std::string code = kernel(
      "#include \"h.cuh\"\n#include \"later.cuh\"\n#ifndef VALUE\n#define VALUE 18009\n#endif");
  program_options o = named(file);
  o.auto_pch = false;  // one NVRTC compile per program::compile: the writer's opens are NVRTC's

  struct scenario {
    const char* what;
    std::string meanwhile;  // what NVRTC reads
    int value;              // what it compiles to
  };
  for (const scenario& sc : {scenario{"truncated, then the same bytes", "", 18009},
                             scenario{"changed, then changed back", defines_value(18002), 18002}}) {
    SCOPED_TRACE(sc.what);
    write_text(header, original);
    struct stat before {};
    ASSERT_EQ(::stat(header.c_str(), &before), 0);
    const std::uint64_t changed_before = skips(cache, cache_skip_reason::header_changed);
    writer_arming_cache arming(
        cache, {{header, [&](int fd) { testing::rewrite_fd(fd, sc.meanwhile); }},
                {later, [&](int) {
                   // NVRTC has read h.cuh: its old bytes and mtime go back.
                   const int fd = ::open(header.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
                   ASSERT_GE(fd, 0);
                   testing::rewrite_fd(fd, original);
                   const struct timespec times[2] = {{0, UTIME_OMIT}, before.st_mtim};
                   ASSERT_EQ(::futimens(fd, times), 0);
                   ::close(fd);
                 }}});

    testing::log_capture logs;
    program p(code, source_type::cxx, o);
    const object_code got = p.compile(code_type::ptx, {}, &arming);
    ASSERT_TRUE(arming.writer && arming.writer->ok()) << arming.writer->error();
    EXPECT_EQ(arming.writer->done(), 2u) << "NVRTC opened both headers, each after its action";
    arming.writer.reset();
    EXPECT_EQ(outcome(p), "miss");
    EXPECT_TRUE(stores(got, sc.value)) << got.text();

    // Nothing under the key, whose headers hold the original bytes again (the same key anew).
    const program_cache_key key = *p.last_cache_key();
    EXPECT_EQ(key_of(cache, code, o), key) << "content digests cannot see this change";
    EXPECT_FALSE(cache.get(key)) << "stored under a key naming other header contents";
    EXPECT_TRUE(p.last_store_refusal());
    if (p.last_store_refusal()) {
      EXPECT_EQ(p.last_store_refusal()->reason, cache_skip_reason::header_changed);
      EXPECT_EQ(p.last_store_refusal()->path, header.string());
    }
    EXPECT_EQ(logs.warnings(header.string() + " changed during the compile"), 1u) << logs.all();
    EXPECT_EQ(skips(cache, cache_skip_reason::header_changed), changed_before + 1);

    // The result is what an uncached compile of what NVRTC read gives.
    write_text(header, sc.meanwhile);
    EXPECT_TRUE(got == program(code, source_type::cxx, o).compile(code_type::ptx));
    // And with the original contents, settled: a miss that stores, then a hit, both 18001.
    write_text(header, original);
    auto fresh = expect_compile(cache, code, o, cache_outcome::miss);
    EXPECT_TRUE(stores(fresh, 18001)) << fresh.text();
    expect_compile(cache, code, o, cache_outcome::hit);
    cache.clear();
  }
}

// The "too new" rule: a header whose mtime is not older than the walk's start minus its
// timestamp granularity (here: in the future, as after `touch -d` or from a clock ahead) is not
// stored even though nothing changed during the compile: a change within one timestamp tick
// would leave every stat field as it was. Once it has settled (an old mtime, and the ctime that
// setting it moved a tick in the past), the next compile stores.
TEST(NoStoreAcrossAChange, TooNewHeaderIsStoredOnceItHasSettled) {
  temp_dir src;
  temp_dir cache_dir;
  file_stream_program_cache cache(cache_dir / "cache");
  const fs::path file = src / "k.cu";
  const fs::path header = src / "h.cuh";
  write_text(header, defines_value(19001));
  const std::string code = kernel("#include \"h.cuh\"");
  program_options o = named(file);
  set_times(header, ::time(nullptr) + 3600);
  testing::settle(header, /*mtime_too=*/false);  // the ctime old enough: only the mtime too new

  testing::log_capture logs;
  program p(code, source_type::cxx, o);
  const object_code got = p.compile(code_type::ptx, {}, &cache);
  EXPECT_EQ(outcome(p), "miss");
  EXPECT_TRUE(stores(got, 19001)) << got.text();
  EXPECT_TRUE(got == program(code, source_type::cxx, o).compile(code_type::ptx));
  ASSERT_TRUE(p.last_store_refusal());
  EXPECT_EQ(p.last_store_refusal()->reason, cache_skip_reason::header_too_new);
  EXPECT_EQ(p.last_store_refusal()->path, header.string());
  EXPECT_TRUE(contains(p.last_store_refusal()->message, "before the key was made"))
      << p.last_store_refusal()->message;
  EXPECT_EQ(logs.warnings(header.string() + " was modified"), 1u) << logs.all();
  EXPECT_FALSE(cache.get(*p.last_cache_key()));
  EXPECT_EQ(skips(cache, cache_skip_reason::header_too_new), 1u);
  EXPECT_EQ(skips(cache, cache_skip_reason::header_changed), 0u);

  // An old mtime; the ctime is now, so not yet; settled, the same key stores, then hits.
  set_times(header, ::time(nullptr) - 3600);
  testing::settle(header);
  auto stored = expect_compile(cache, code, o, cache_outcome::miss);
  EXPECT_TRUE(stored == got);
  expect_compile(cache, code, o, cache_outcome::hit);
  EXPECT_EQ(skips(cache, cache_skip_reason::header_too_new), 1u);
}

}  // namespace
}  // namespace cucore
