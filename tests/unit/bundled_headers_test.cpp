// NVRTC 13.3+'s bundled headers as an include root (use_bundled_headers, and the fallback for a
// toolkit without CCCL), and nvJitLink 13.3+'s linked LTO-IR and relocatable LTO link. The
// library loads one NVRTC per process, so every NVRTC 13.5 case runs in a fresh process of this
// binary (`bundled_headers_test --child CASE`) with CUCORE_CUDA_HOME pointing at a 13.5 root:
// <source dir>/.cache/cuda-versions/13.5/root, or $CUCORE_CUDA_VERSIONS_DIR/13.5/root.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cucore/cucore.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

extern char** environ;

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::kArch;
using testing::read_text;
using testing::temp_dir;
using testing::write_text;

constexpr const char* kCub = R"(#include <cub/block/block_reduce.cuh>
extern "C" __global__ void sum(const int* in, int* out) {
  using R = cub::BlockReduce<int, 128>;
  __shared__ typename R::TempStorage t;
  int v = R(t).Sum(in[threadIdx.x]);
  if (threadIdx.x == 0) *out = v;
}
)";

fs::path root_135() {
  const char* dir = std::getenv("CUCORE_CUDA_VERSIONS_DIR");
  const fs::path base = dir != nullptr && *dir != '\0'
                            ? fs::path(dir)
                            : fs::path(CUCORE_SOURCE_DIR) / ".cache" / "cuda-versions";
  return base / "13.5" / "root";
}

bool same_bytes(const object_code& a, const object_code& b) {
  return a.code().size() == b.code().size() &&
         std::memcmp(a.code().data(), b.code().data(), a.code().size()) == 0;
}

// ---- The child cases (run in a fresh process with NVRTC 13.5) ----

#define CHILD_CHECK(cond)                                                             \
  do {                                                                                \
    if (!(cond)) return std::string("line ") + std::to_string(__LINE__) + ": " #cond; \
  } while (0)

// Cached compile of the CUB kernel: a miss equal to an uncached compile of this process, then a
// hit with the same bytes.
std::string miss_then_hit(const program_options& options, program_cache& cache) {
  program uncached(kCub, source_type::cxx, options);
  const object_code reference = uncached.compile(code_type::cubin);
  program p(kCub, source_type::cxx, options);
  const object_code miss = p.compile(code_type::cubin, cache);
  CHILD_CHECK(p.last_cache_outcome() == cache_outcome::miss);
  CHILD_CHECK(same_bytes(miss, reference));
  const object_code hit = p.compile(code_type::cubin, cache);
  CHILD_CHECK(p.last_cache_outcome() == cache_outcome::hit);
  CHILD_CHECK(same_bytes(hit, reference));
  return {};
}

// A root with NVRTC 13.5's libraries and no include/ at all: the bundled headers are installed
// into the cache directory and are the toolkit's include root; an edit there is a miss.
std::string fallback_case(const fs::path& cache_dir) {
  const auto& dirs = toolkit::include_directories();
  CHILD_CHECK(dirs.size() == 2);
  const fs::path installed = dirs[0];
  CHILD_CHECK(installed.parent_path() == cache_dir / "bundled-headers");
  CHILD_CHECK(dirs[1] == (installed / "cccl").string());
  CHILD_CHECK(fs::is_regular_file(installed / ".nvrtc_headers_version"));
  CHILD_CHECK(contains(toolkit::query().include_source, "bundled headers"));

  program_options options;
  options.arch = kArch;
  options.name = "sum.cu";
  file_stream_program_cache cache(cache_dir / "entries-here");
  if (auto why = miss_then_hit(options, cache); !why.empty()) return why;

  // The key walked the installed headers like any include root.
  program_cache_key_inputs in;
  in.code = kCub;
  in.code_type = source_type::cxx;
  in.target = code_type::cubin;
  in.options = options;
  const program_cache_key before = make_program_cache_key(in);
  CHILD_CHECK(before.includes().files > 100);
  const fs::path header = installed / "cccl/cub/block/block_reduce.cuh";
  CHILD_CHECK(fs::is_regular_file(header));
  std::string text = read_text(header);
  write_text(header, text + "\n#define CUCORE_EDITED_BUNDLED_HEADER 1\n");
  testing::settle(header);
  CHILD_CHECK(make_program_cache_key(in) != before);
  program p(kCub, source_type::cxx, options);
  p.compile(code_type::cubin, cache);
  CHILD_CHECK(p.last_cache_outcome() == cache_outcome::miss);
  return {};
}

// use_bundled_headers on a full 13.5 root: the bundled directories replace the toolkit's, where
// NVRTC's --use-bundled-headers=DIR puts them (after include_path: DIR, DIR/cccl).
std::string option_case(const fs::path& cache_dir) {
  program_options options;
  options.arch = kArch;
  options.name = "sum.cu";
  options.include_path = {"/nonexistent/user-dir"};
  options.use_bundled_headers = true;
  const auto flags = compiler_flags(options, source_type::cxx, code_type::cubin);
  const std::string dir = (cache_dir / "bundled-headers").string();
  std::vector<std::string> includes;
  for (const auto& f : flags) {
    if (f.starts_with("--include-path=")) includes.push_back(f.substr(15));
  }
  CHILD_CHECK(includes.size() == 3);
  CHILD_CHECK(includes[0] == "/nonexistent/user-dir");
  CHILD_CHECK(includes[1].starts_with(dir + "/"));
  CHILD_CHECK(includes[2] == includes[1] + "/cccl");
  for (const auto& toolkit_dir : toolkit::include_directories()) {
    CHILD_CHECK(std::find(includes.begin(), includes.end(), toolkit_dir) == includes.end());
  }
  file_stream_program_cache cache(cache_dir / "entries-here");
  return miss_then_hit(options, cache);
}

// Processes racing to install into a fresh cache: one directory, complete, no temp left.
std::string race_case(const fs::path& cache_dir) {
  const auto reports = testing::run_children(4, [&](int) -> std::string {
    const auto dirs = toolkit::bundled_include_directories();
    return dirs.at(0);
  });
  for (const auto& r : reports) CHILD_CHECK(r == reports[0]);
  CHILD_CHECK(fs::is_regular_file(fs::path(reports[0]) / ".nvrtc_headers_version"));
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(cache_dir / "bundled-headers")) {
    CHILD_CHECK(!e.path().filename().string().starts_with(".tmp-"));
    ++entries;
  }
  CHILD_CHECK(entries == 1);
  return {};
}

std::vector<object_code> caller_and_callee() {
  program_options o;
  o.arch = kArch;
  o.relocatable_device_code = true;
  program caller(
      "extern __device__ int g(int); extern \"C\" __global__ void k(int* o) { *o = "
      "g(threadIdx.x); }",
      source_type::cxx, o);
  program callee("__device__ int g(int x) { return x * 3; }", source_type::cxx, o);
  return {caller.compile(code_type::ltoir), callee.compile(code_type::ltoir)};
}

int elf_type(const object_code& cubin) {
  if (cubin.code().size() < 18) return -1;
  return static_cast<int>(cubin.code()[16]);
}

// nvJitLink 13.5: linked LTO-IR, and -r under -lto gives a relocatable cubin (ET_REL).
std::string linker_case() {
  const auto inputs = caller_and_callee();
  linker_options lo;
  lo.arch = kArch;
  const object_code ltoir = linker(inputs, lo).link(code_type::ltoir);
  CHILD_CHECK(ltoir.type() == code_type::ltoir);
  CHILD_CHECK(ltoir.code().size() > 1000);
  // Linked LTO-IR links again, to the same kind of cubin.
  lo.link_time_optimization = true;
  const object_code exec = linker(inputs, lo).link(code_type::cubin);
  CHILD_CHECK(elf_type(exec) == 2);
  const object_code again = linker({ltoir}, lo).link(code_type::cubin);
  CHILD_CHECK(elf_type(again) == 2);
  lo.relocatable = true;
  const object_code relocatable = linker(inputs, lo).link(code_type::cubin);
  CHILD_CHECK(elf_type(relocatable) == 1);
  return {};
}

int run_child(const std::string& which) {
  const char* dir = std::getenv("CUCORE_CACHE_DIR");
  std::string why;
  try {
    if (which == "fallback") why = fallback_case(dir);
    if (which == "option") why = option_case(dir);
    if (which == "race") why = race_case(dir);
    if (which == "linker") why = linker_case();
  } catch (const std::exception& e) {
    why = std::string("threw: ") + e.what();
  }
  std::cout << (why.empty() ? "ok" : why) << std::endl;
  return why.empty() ? 0 : 1;
}

// ---- The parent side ----

struct child_result {
  int status = -1;
  std::string output;
};

child_result spawn_child(const std::string& which, const fs::path& cuda_home,
                         const fs::path& cache_dir, const fs::path& out) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v(*e);
    if (v.starts_with("CUCORE_CUDA_") || v.starts_with("CUCORE_CACHE_DIR=")) continue;
    env.emplace_back(v);
  }
  env.push_back("CUCORE_CUDA_HOME=" + cuda_home.string());
  env.push_back("CUCORE_CUDA_HOME_ONLY=1");
  env.push_back("CUCORE_CACHE_DIR=" + cache_dir.string());
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string flag = "--child";
  std::string arg = which;
  std::vector<char*> argv = {exe.data(), flag.data(), arg.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  child_result r;
  if (::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data()) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    r.output = "posix_spawn failed";
    return r;
  }
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = read_text(out);
  return r;
}

class Nvrtc135 : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::is_regular_file(root_135() / "lib/libnvrtc.so.13"))
        << "no NVRTC 13.5 root at " << root_135()
        << ": run scripts/fetch-cuda-versions.sh (or set CUCORE_CUDA_VERSIONS_DIR to a directory "
           "holding 13.5/root)";
  }
  // A root with 13.5's libraries (links) and no include/: NVRTC's wheel alone.
  fs::path root_without_cccl() {
    const fs::path root = dir_ / "nvrtc-only";
    fs::create_directories(root / "lib");
    for (const auto& e : fs::directory_iterator(root_135() / "lib")) {
      fs::create_symlink(e.path(), root / "lib" / e.path().filename());
    }
    return root;
  }
  void expect_child(const std::string& which, const fs::path& home) {
    const fs::path cache = dir_ / ("cache-" + which);
    fs::create_directory(cache);
    fs::permissions(cache, fs::perms::owner_all);
    const auto r = spawn_child(which, home, cache, dir_ / (which + ".out"));
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "ok")) << r.output;
  }
  temp_dir dir_;
};

TEST_F(Nvrtc135, WithoutCcclTheBundledHeadersAreTheToolkitRootKeyedLikeAny) {
  expect_child("fallback", root_without_cccl());
}

TEST_F(Nvrtc135, UseBundledHeadersReplacesTheToolkitDirectoriesAndIsCached) {
  expect_child("option", root_135());
}

TEST_F(Nvrtc135, RacingProcessesInstallOneDirectory) {
  expect_child("race", root_without_cccl());
}

TEST_F(Nvrtc135, LinksToLtoirAndRelocatableUnderLto) {
  expect_child("linker", root_135());
}

// ---- This process: the toolkit's NVRTC/nvJitLink 13.0, which lack all of it ----

TEST(BundledHeaders13_0, UseBundledHeadersIsRefusedNamingTheField) {
  if (toolkit::nvrtc_version() >= version{13, 3}) {
    GTEST_SKIP() << "this process's NVRTC bundles headers: the Nvrtc135 cases cover it";
  }
  program_options o;
  o.arch = kArch;
  o.use_bundled_headers = true;
  try {
    compiler_flags(o, source_type::cxx, code_type::cubin);
    FAIL() << "NVRTC " << toolkit::nvrtc_version().to_string() << " took use_bundled_headers";
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "use_bundled_headers")) << e.what();
    EXPECT_TRUE(contains(e.what(), "13.3")) << e.what();
  }
  // Not an NVVM or PTX field.
  EXPECT_THROW(compiler_flags(o, source_type::nvvm, code_type::ptx), invalid_argument);
}

TEST(Linker13_0, LtoirOutputAndRelocatableLtoAreRefusedByName) {
  ASSERT_EQ(linker::which_backend(), linker_backend::nvjitlink);
  if (toolkit::nvjitlink_version() >= version{13, 3}) {
    GTEST_SKIP() << "this process's nvJitLink has both: the Nvrtc135 cases cover it";
  }
  const auto inputs = caller_and_callee();
  linker_options lo;
  lo.arch = kArch;
  try {
    linker(inputs, lo).link(code_type::ltoir);
    FAIL() << "linked to ltoir with nvJitLink " << toolkit::nvjitlink_version().to_string();
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "nvJitLinkGetLinkedLTOIR")) << e.what();
  }
  lo.link_time_optimization = true;
  lo.relocatable = true;
  try {
    linker(inputs, lo).link(code_type::cubin);
    FAIL() << "relocatable LTO link with nvJitLink " << toolkit::nvjitlink_version().to_string();
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "relocatable")) << e.what();
  }
}

TEST(Linker13_0, RelocatablePtxProgramIsARelocatableCubinAndKeyed) {
  program_options o;
  o.arch = kArch;
  const object_code ptx_code =
      program(R"(extern "C" __global__ void k(int* o) { *o = 1; })", source_type::cxx, o)
          .compile(code_type::ptx);
  const std::string ptx(ptx_code.text());
  const object_code plain = program(ptx, source_type::ptx, o).compile(code_type::cubin);
  EXPECT_EQ(elf_type(plain), 2);
  o.relocatable_device_code = true;
  const object_code relocatable = program(ptx, source_type::ptx, o).compile(code_type::cubin);
  EXPECT_EQ(elf_type(relocatable), 1);
  const auto flags = compiler_flags(o, source_type::ptx, code_type::cubin);
  EXPECT_NE(std::find(flags.begin(), flags.end(), "-r"), flags.end());
}

}  // namespace
}  // namespace cucore

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--child") return cucore::run_child(argv[2]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
