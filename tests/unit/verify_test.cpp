// Verify mode (docs/verify.md): a sampled hit is compiled again, uncached, and compared with the
// entry; a mismatch removes the entry, returns the fresh result and is counted and reported. Real
// NVRTC compiles, a real directory cache, real processes for the sampled rate.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cucore/cucore.hpp"
#include "test_support.hpp"
#include "verify/hit_verifier.hpp"

namespace fs = std::filesystem;

namespace {

cucore::program_options options_in(const fs::path& dir, std::optional<double> verify) {
  cucore::program_options o;
  o.arch = "sm_90";
  o.name = (dir / "kernel.cu").string();
  o.verify = verify;
  return o;
}

const std::string kCode =
    "#include \"value.cuh\"\n"
    "extern \"C\" __global__ void k(int* p) { *p = VALUE; }\n";

std::string text_of(const cucore::object_code& c) {
  return {reinterpret_cast<const char*>(c.code().data()), c.code().size()};
}

class Verify : public ::testing::Test {
 protected:
  cucore::testing::temp_dir scratch_;
  fs::path dir_ = scratch_.path();
};

// A header whose page is dirty in a shared writable mapping: edit() changes its bytes and none of
// its stat fields (false where the file system stamps the write anyway).
class dirty_header {
 public:
  explicit dirty_header(const fs::path& path) {
    std::ofstream(path) << "#define VALUE 1111\n";
    fd_ = ::open(path.c_str(), O_RDWR);
    size_ = fs::file_size(path);
    map_ = static_cast<char*>(::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    map_[14] = '1';  // the page dirty now (its one mtime update: at this first write)
    // Settled (older than the walk's 2 s: its identity then vouches for its digest).
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
    ::fstat(fd_, &before_);
  }
  ~dirty_header() {
    ::munmap(map_, size_);
    ::close(fd_);
  }
  dirty_header(const dirty_header&) = delete;
  dirty_header& operator=(const dirty_header&) = delete;

  bool edit() {
    std::memcpy(map_ + 14, "2222", 4);
    struct stat after {};
    ::fstat(fd_, &after);
    return after.st_mtim.tv_nsec == before_.st_mtim.tv_nsec &&
           after.st_mtim.tv_sec == before_.st_mtim.tv_sec && after.st_size == before_.st_size;
  }

 private:
  int fd_ = -1;
  std::size_t size_ = 0;
  char* map_ = nullptr;
  struct stat before_ {};
};

// Every hit sampled, yet below rate 1 (so in the background by default): 1e-7 misses a sample.
constexpr double kAlmostEveryHit = 0.9999999;

}  // namespace

// The documented limit verify mode exists for: a header edited through a page that was already
// dirty in a shared writable mapping changes its bytes, not its stat fields, so the key (and the
// walk's manifest) still match and the hit is stale. With verify on, the hit is caught: the fresh
// bytes are returned, the entry is removed, and the stats and the report say so.
TEST_F(Verify, AStaleHitThroughADirtyMappingIsCaught) {
  dirty_header header(dir_ / "value.cuh");
  const auto cache = cucore::open_program_cache("dir:" + (dir_ / "cache").string());
  ::setenv("CUCORE_VERIFY_REPORTS", (dir_ / "reports").c_str(), 1);

  cucore::program first(kCode, cucore::source_type::cxx, options_in(dir_, std::nullopt));
  const std::string stored = text_of(first.compile(cucore::code_type::ptx, {}, cache.get()));
  ASSERT_EQ(first.last_cache_outcome(), cucore::cache_outcome::miss);
  ASSERT_TRUE(first.last_stored());
  EXPECT_NE(stored.find("1111"), std::string::npos);

  if (!header.edit()) GTEST_SKIP() << "this file system stamped the write through a dirty page";
  // Without verify: the stale hit (what the limit means).
  cucore::program stale(kCode, cucore::source_type::cxx, options_in(dir_, 0.0));
  EXPECT_EQ(text_of(stale.compile(cucore::code_type::ptx, {}, cache.get())), stored);
  EXPECT_EQ(stale.last_cache_outcome(), cucore::cache_outcome::hit)
      << first.last_cache_key()->hex() << " then " << stale.last_cache_key()->hex();
  EXPECT_EQ(stale.last_verify(), cucore::verify_outcome::not_verified);

  const auto counts_before = cache->statistics()->read();
  cucore::program checked(kCode, cucore::source_type::cxx, options_in(dir_, 1.0));
  const std::string fresh = text_of(checked.compile(cucore::code_type::ptx, {}, cache.get()));
  EXPECT_EQ(checked.last_verify(), cucore::verify_outcome::mismatch);
  EXPECT_NE(fresh.find("2222"), std::string::npos) << "the fresh result is returned";
  // What an uncached compile gives now (NVRTC's per-process names masked).
  const cucore::object_code plain =
      cucore::program(kCode, cucore::source_type::cxx, options_in(dir_, std::nullopt))
          .compile(cucore::code_type::ptx);
  EXPECT_EQ(text_of(plain), fresh);
  const auto counts = cache->statistics()->read();
  EXPECT_EQ(counts.verified - counts_before.verified, 1u);
  EXPECT_EQ(counts.verify_mismatches - counts_before.verify_mismatches, 1u);
  ASSERT_TRUE(checked.last_verify_report());
  std::ifstream report(*checked.last_verify_report());
  const std::string text((std::istreambuf_iterator<char>(report)), {});
  EXPECT_NE(text.find("first difference at byte"), std::string::npos) << text;
  EXPECT_NE(text.find(checked.last_cache_key()->hex()), std::string::npos) << text;

  // The entry is gone: the next compile misses, and stores the fresh bytes.
  cucore::program after_fix(kCode, cucore::source_type::cxx, options_in(dir_, std::nullopt));
  (void)after_fix.compile(cucore::code_type::ptx, {}, cache.get());
  EXPECT_EQ(after_fix.last_cache_outcome(), cucore::cache_outcome::miss);
  ::unsetenv("CUCORE_VERIFY_REPORTS");
}

// Below rate 1 the check runs on the background thread: the hit returns the cached bytes at once
// (queued), and the thread catches the stale entry, counts and reports it, and removes it at once
// from a cache owned by a std::shared_ptr; from one owned otherwise, at this process's next compile
// through it.
TEST_F(Verify, BelowRateOneAStaleHitIsCaughtInTheBackground) {
  ::setenv("CUCORE_VERIFY_REPORTS", (dir_ / "reports").c_str(), 1);
  for (const bool shared : {true, false}) {
    SCOPED_TRACE(shared ? "shared_ptr" : "unique_ptr");
    const fs::path where = dir_ / (shared ? "shared" : "unique");
    fs::create_directories(where);
    dirty_header header(where / "value.cuh");
    std::unique_ptr<cucore::program_cache> owned =
        cucore::open_program_cache("dir:" + (where / "cache").string());
    std::shared_ptr<cucore::program_cache> cache;
    if (shared) cache = std::move(owned);
    cucore::program_cache& c = shared ? *cache : *owned;

    cucore::program first(kCode, cucore::source_type::cxx, options_in(where, std::nullopt));
    (void)first.compile(cucore::code_type::ptx, {}, &c);
    ASSERT_TRUE(first.last_stored());
    const cucore::program_cache_key key = *first.last_cache_key();
    if (!header.edit()) GTEST_SKIP() << "this file system stamped the write through a dirty page";
    const auto counts_before = c.statistics()->read();

    cucore::program checked(kCode, cucore::source_type::cxx, options_in(where, kAlmostEveryHit));
    const std::string got = text_of(checked.compile(cucore::code_type::ptx, {}, &c));
    EXPECT_EQ(checked.last_cache_outcome(), cucore::cache_outcome::hit);
    EXPECT_EQ(checked.last_verify(), cucore::verify_outcome::queued);
    EXPECT_NE(got.find("1111"), std::string::npos) << "the hit returns the cached bytes";
    cucore::wait_for_background_verification();
    const auto counts = c.statistics()->read();
    EXPECT_EQ(counts.verified - counts_before.verified, 1u);
    EXPECT_EQ(counts.verify_mismatches - counts_before.verify_mismatches, 1u);
    if (shared) {
      EXPECT_FALSE(c.get(key)) << "removed by the background thread";
    } else {
      EXPECT_TRUE(c.get(key)) << "a cache the thread cannot reach keeps it until its next compile";
      cucore::program other("extern \"C\" __global__ void other() {}", cucore::source_type::cxx,
                            options_in(where, std::nullopt));
      (void)other.compile(cucore::code_type::ptx, {}, &c);
      EXPECT_FALSE(c.get(key)) << "removed at the next compile through the cache";
    }
    // The next compile misses, and gives what the header says now.
    cucore::program again(kCode, cucore::source_type::cxx, options_in(where, std::nullopt));
    EXPECT_NE(text_of(again.compile(cucore::code_type::ptx, {}, &c)).find("2222"),
              std::string::npos);
    EXPECT_EQ(again.last_cache_outcome(), cucore::cache_outcome::miss);
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "reports"), fs::directory_iterator()), 2);
  ::unsetenv("CUCORE_VERIFY_REPORTS");
}

// verify_in_background overrides the rate's default: true at rate 1 queues, false below 1 checks
// on the calling thread. A good hit checked in the background is counted verified and kept.
TEST_F(Verify, WhereTheCheckRunsIsTheCallersChoice) {
  std::ofstream(dir_ / "value.cuh") << "#define VALUE 7\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto cache = cucore::open_program_cache("dir:" + (dir_ / "cache").string());
  cucore::program a(kCode, cucore::source_type::cxx, options_in(dir_, std::nullopt));
  const std::string stored = text_of(a.compile(cucore::code_type::ptx, {}, cache.get()));
  ASSERT_TRUE(a.last_stored());

  auto o = options_in(dir_, 1.0);
  o.verify_in_background = true;
  cucore::program b(kCode, cucore::source_type::cxx, o);
  EXPECT_EQ(text_of(b.compile(cucore::code_type::ptx, {}, cache.get())), stored);
  EXPECT_EQ(b.last_verify(), cucore::verify_outcome::queued);
  cucore::wait_for_background_verification();
  EXPECT_EQ(cache->statistics()->read().verified, 1u);
  EXPECT_EQ(cache->statistics()->read().verify_mismatches, 0u);

  o = options_in(dir_, kAlmostEveryHit);
  o.verify_in_background = false;
  cucore::program c(kCode, cucore::source_type::cxx, o);
  EXPECT_EQ(text_of(c.compile(cucore::code_type::ptx, {}, cache.get())), stored);
  EXPECT_EQ(c.last_verify(), cucore::verify_outcome::verified);
  EXPECT_EQ(cache->statistics()->read().verified, 2u);
}

// A good hit verifies (the same bytes, NVRTC's per-process names masked: CUB's libcu++ CPOs) and
// is returned as it was, entry kept.
TEST_F(Verify, AGoodHitIsVerifiedAndKept) {
  std::ofstream(dir_ / "value.cuh") << "#include <cuda/std/complex>\n#define VALUE 7\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto cache = cucore::open_program_cache("dir:" + (dir_ / "cache").string());
  for (const auto target : {cucore::code_type::ptx, cucore::code_type::cubin}) {
    cucore::program a(kCode, cucore::source_type::cxx, options_in(dir_, std::nullopt));
    const cucore::object_code stored = a.compile(target, {}, cache.get());
    ASSERT_TRUE(a.last_stored());
    cucore::program b(kCode, cucore::source_type::cxx, options_in(dir_, 1.0));
    const cucore::object_code hit = b.compile(target, {}, cache.get());
    EXPECT_EQ(b.last_cache_outcome(), cucore::cache_outcome::hit);
    EXPECT_EQ(b.last_verify(), cucore::verify_outcome::verified) << to_string(target);
    EXPECT_EQ(text_of(hit), text_of(stored));
  }
  EXPECT_THROW((void)cucore::detail::verify_rate(options_in(dir_, 1.5)), cucore::invalid_argument);
}

// NVRTC's per-process names inside mangled names (_ZN..40_INTERNAL_<module>_<8 hex>_<pid>4cuda...,
// where the next component runs on from the pid: only the length prefix bounds it) are pinned
// and masked too: a good hit of a libcu++ template kernel with a name expression verifies. And a
// PTX program's hit verifies (the linker takes no NVRTC-only options).
TEST_F(Verify, MangledPerProcessNamesAndPtxSourcesVerify) {
  const std::string code =
      "#include <cuda/std/iterator>\n"
      "template <class T> __global__ void f(T* p) { *p = *cuda::std::next(p); }\n";
  const std::vector<std::string> names = {"f<int>"};
  const auto cache = cucore::open_program_cache("dir:" + (dir_ / "cache").string());
  cucore::program a(code, cucore::source_type::cxx, options_in(dir_, std::nullopt));
  const cucore::object_code stored = a.compile(cucore::code_type::ptx, names, cache.get());
  ASSERT_TRUE(a.last_stored());
  const std::string text = text_of(stored);
  ASSERT_NE(text.find("_INTERNAL_"), std::string::npos) << "no per-process names to check";
  ASSERT_TRUE(cucore::detail::output_pid(stored.code())) << "the pid inside a mangled name";
  cucore::program b(code, cucore::source_type::cxx, options_in(dir_, 1.0));
  (void)b.compile(cucore::code_type::ptx, names, cache.get());
  EXPECT_EQ(b.last_verify(), cucore::verify_outcome::verified);

  auto o = options_in(dir_, std::nullopt);
  o.name = "k.ptx";
  cucore::program ptx(text, cucore::source_type::ptx, o);
  (void)ptx.compile(cucore::code_type::cubin, {}, cache.get());
  o.verify = 1.0;
  cucore::program ptx_hit(text, cucore::source_type::ptx, o);
  (void)ptx_hit.compile(cucore::code_type::cubin, {}, cache.get());
  EXPECT_EQ(ptx_hit.last_cache_outcome(), cucore::cache_outcome::hit);
  EXPECT_EQ(ptx_hit.last_verify(), cucore::verify_outcome::verified);
}

// The sampled rate, across processes: `cucore compile --verify-rate 0.25` hits 60 times; about a
// quarter are verified (binomial: 15 expected, 4.4 standard deviations either way allowed).
TEST_F(Verify, ASampledRateVerifiesAboutThatFractionAcrossProcesses) {
  const fs::path kernel = dir_ / "k.cu";
  std::ofstream(kernel) << "extern \"C\" __global__ void k(int* p) { *p = 3; }\n";
  const std::string cache = "dir:" + (dir_ / "cache").string();
  const std::string base = std::string(CUCORE_CLI_PATH) + " compile --arch sm_90 --target ptx -o " +
                           (dir_ / "k.ptx").string() + " --cache " + cache + " " + kernel.string() +
                           " >/dev/null";
  ASSERT_EQ(std::system(base.c_str()), 0);  // the miss
  for (int i = 0; i < 60; ++i) {
    ASSERT_EQ(std::system((base + " --verify-rate 0.25").c_str()), 0);
  }
  const auto counts = cucore::open_program_cache(cache)->statistics()->read();
  EXPECT_GE(counts.verified, 5u);
  EXPECT_LE(counts.verified, 27u);
  EXPECT_EQ(counts.verify_mismatches, 0u);
  EXPECT_EQ(counts.local.hits, 60u);
}

// Issue 39's remaining gap: __TIME__ pasted from one-character pieces and used as a number is
// stored (neither the key's scan nor the output's clock text sees it). A verified hit is compiled
// 400 days and 7 hours on: the hour differs, the stale entry is caught.
TEST_F(Verify, AClockTheKeyCannotSeeIsCaughtByTheReplayedClock) {
  const std::string code =
      "#define C8(a,b,c,d,e,f,g,h) a##b##c##d##e##f##g##h\n"
      "#define T_ C8(_,_,T,I,M,E,_,_)\n"
      "extern \"C\" __global__ void k(int* p) { *p = (T_[0] - '0') * 10 + (T_[1] - '0'); }\n";
  const auto cache = cucore::open_program_cache("dir:" + (dir_ / "cache").string());
  ::setenv("CUCORE_VERIFY_REPORTS", (dir_ / "reports").c_str(), 1);
  cucore::program first(code, cucore::source_type::cxx, options_in(dir_, std::nullopt));
  (void)first.compile(cucore::code_type::ptx, {}, cache.get());
  ASSERT_TRUE(first.last_stored()) << "the gap is closed: update docs/cache-keys.md";
  cucore::program checked(code, cucore::source_type::cxx, options_in(dir_, 1.0));
  (void)checked.compile(cucore::code_type::ptx, {}, cache.get());
  EXPECT_EQ(checked.last_cache_outcome(), cucore::cache_outcome::hit);
  EXPECT_EQ(checked.last_verify(), cucore::verify_outcome::mismatch);
  ::unsetenv("CUCORE_VERIFY_REPORTS");
}
