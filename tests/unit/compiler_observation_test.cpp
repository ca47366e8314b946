// The observation of what a compile reads (src/observe/) and the store gate over it
// (program_cache_key::check_store(observed_inputs)): real NVRTC compiles, no GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "cucore/cucore.hpp"
#include "key/observation_gate.hpp"
#include "nvrtc_versions.hpp"  // CUCORE_TEST_NVRTC: the version matrix
#include "observe/compiler_observer.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using cucore::detail::compiler_observation;
using cucore::detail::observed_call;
using cucore::detail::observed_inputs;

namespace {

cucore::program_options sm90() {
  cucore::program_options o;
  o.arch = "sm_90";
  return o;
}

// Compiles uncached under an observation; the key of the same inputs, made before.
struct observed_compile {
  cucore::program_cache_key key;
  observed_inputs seen;
  bool compiled = false;
};

observed_compile compile_observed(const std::string& code, const cucore::program_options& o,
                                  cucore::code_type target = cucore::code_type::cubin) {
  cucore::program_cache_key_inputs in;
  in.code = code;
  in.code_type = cucore::source_type::cxx;
  in.options = o;
  in.target = target;
  observed_compile out{cucore::make_program_cache_key(in), {}, false};
  cucore::program p(code, cucore::source_type::cxx, o);
  compiler_observation watch;
  try {
    (void)p.compile(target);
    out.compiled = true;
  } catch (const cucore::compile_error&) {
  }
  out.seen = watch.finish();
  return out;
}

std::string refusal_text(const std::optional<cucore::store_refusal>& r) {
  return r ? r->message : std::string("stored");
}

std::string describe(const observed_inputs& seen) {
  std::string out = seen.unobserved.empty() ? "" : "unobserved: " + seen.unobserved + "\n";
  for (const auto& in : seen.inputs) {
    out += std::string(cucore::detail::to_string(in.call)) + (in.found ? " " : " (absent) ") +
           in.name + "\n";
  }
  return out;
}

bool saw(const observed_inputs& seen, observed_call call, const std::string& name) {
  for (const auto& in : seen.inputs) {
    if (in.call == call && in.name == name) return true;
  }
  return false;
}

class CompilerObservation : public ::testing::Test {
 protected:
  void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    // Older than its timestamps' granularity when the key is made (check_store's too-new rule).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  cucore::testing::temp_dir scratch_;
  fs::path dir_ = scratch_.path();
};

}  // namespace

TEST_F(CompilerObservation, APlainCompileReadsOnlyWhatItsKeyCovers) {
  const auto c = compile_observed("extern \"C\" __global__ void k(int* p) { *p = 1; }", sm90());
  ASSERT_TRUE(c.compiled);
  EXPECT_TRUE(c.seen.unobserved.empty()) << c.seen.unobserved;
  EXPECT_EQ(refusal_text(c.key.check_store(c.seen)), "stored") << describe(c.seen);
  if (std::getenv("CUCORE_SHOW_OBSERVED") != nullptr)
    std::fprintf(stderr, "%s", describe(c.seen).c_str());
}

TEST_F(CompilerObservation, EveryHeaderOfACubKernelIsSeenAndCovered) {
  auto o = sm90();
  o.name = (dir_ / "k.cu").string();
  write(dir_ / "mine.cuh", "#pragma once\nconstexpr int mine = 3;\n");
  const auto c = compile_observed(
      "#include \"mine.cuh\"\n#include <cub/block/block_reduce.cuh>\n"
      "extern \"C\" __global__ void k(int* p) {\n"
      "  using R = cub::BlockReduce<int, 128>;\n  __shared__ R::TempStorage t;\n"
      "  *p = R(t).Sum(threadIdx.x) + mine;\n}\n",
      o);
  ASSERT_TRUE(c.compiled);
  EXPECT_TRUE(saw(c.seen, observed_call::open, (dir_ / "mine.cuh").string())) << describe(c.seen);
  EXPECT_EQ(refusal_text(c.key.check_store(c.seen)), "stored") << describe(c.seen);
  if (std::getenv("CUCORE_SHOW_OBSERVED") != nullptr)
    std::fprintf(stderr, "%s", describe(c.seen).c_str());
}

namespace {

// Compiles through a cache twice: neither may be a hit when the gate refused the first.
struct twice {
  cucore::cache_outcome first, second;
  std::optional<cucore::store_refusal> refusal;
  std::string first_ptx, second_ptx;
};

twice compile_twice(const std::string& code, const cucore::program_options& o) {
  cucore::in_memory_program_cache cache;
  twice out{};
  cucore::program a(code, cucore::source_type::cxx, o);
  out.first_ptx = a.compile(cucore::code_type::ptx, {}, &cache).text();
  out.first = a.last_cache_outcome();
  out.refusal = a.last_store_refusal();
  cucore::program b(code, cucore::source_type::cxx, o);
  out.second_ptx = b.compile(cucore::code_type::ptx, {}, &cache).text();
  out.second = b.last_cache_outcome();
  return out;
}

cucore::detail::key_coverage no_coverage() {
  return {};
}

}  // namespace

// Issue 39, class 3: a file whose contents change without its identity (procfs). Two UTS
// namespaces would show another host's name under the first one's key: no key can name it, so
// nothing is stored.
TEST_F(CompilerObservation, AProcfsIncludeIsCompiledAndNeverStored) {
  if (!fs::exists("/proc/sys/kernel/ostype")) GTEST_SKIP() << "no /proc/sys/kernel/ostype";
  const std::string code =
      "__device__ int\n#include \"/proc/sys/kernel/ostype\"\n= 1;\n"
      "extern \"C\" __global__ void k(int* p) { *p = 1; }\n";
  const auto t = compile_twice(code, sm90());
  EXPECT_EQ(t.first, cucore::cache_outcome::miss);
  EXPECT_EQ(t.second, cucore::cache_outcome::miss);
  ASSERT_TRUE(t.refusal);
  EXPECT_EQ(t.refusal->reason, cucore::cache_skip_reason::process_view_input);
  EXPECT_NE(t.refusal->message.find("/proc/sys/kernel/ostype"), std::string::npos);
}

// Issue 39, class 4 (in process): a probe of a per-process name answers for this process alone.
TEST_F(CompilerObservation, AProbeOfAPerProcessNameIsNeverStored) {
  for (const char* name : {"/dev/stdin", "/proc/self/fd/0"}) {
    const std::string code = std::string("#if __has_include(\"") + name +
                             "\")\n__device__ int val = 2;\n#else\n__device__ int val = 1;\n"
                             "#endif\nextern \"C\" __global__ void k(int* p) { *p = val; }\n";
    const auto t = compile_twice(code, sm90());
    EXPECT_EQ(t.second, cucore::cache_outcome::miss) << name;
    ASSERT_TRUE(t.refusal) << name;
    EXPECT_EQ(t.refusal->reason, cucore::cache_skip_reason::process_view_input) << name;
  }
}

// Issue 39, class 2, as the gate sees it: ptxas reads a file an option names. Whatever the key's
// option table says of it, the compile's observation names the file, and the gate refuses it.
TEST_F(CompilerObservation, AFileAnOptionNamesIsSeenByTheGate) {
  const fs::path file = dir_ / "ptxas.opts";
  write(file, "--maxrregcount=16\n");
  auto o = sm90();
  o.ptxas_options = {"--options-file=" + file.string()};
  const auto c = compile_observed("extern \"C\" __global__ void k(int* p) { *p = 1; }", o);
  ASSERT_TRUE(c.compiled);
  EXPECT_TRUE(saw(c.seen, observed_call::open, file.string())) << describe(c.seen);
  const auto refusal = c.key.check_store(c.seen);
  ASSERT_TRUE(refusal) << describe(c.seen);
  EXPECT_EQ(refusal->reason, cucore::cache_skip_reason::unkeyed_input);
  EXPECT_EQ(refusal->path, file.string());
}

// The gate's rules on inputs no compile here makes: a variable outside the compilers' table, a
// side effect, an observation that could not be made.
TEST_F(CompilerObservation, TheGateRefusesWhatNoKeyCovers) {
  using cucore::detail::check_observed_inputs;
  using cucore::detail::observed_input;
  observed_inputs seen;
  seen.inputs = {{observed_call::getenv, true, "NVRTC_APPEND_FLAGS"},
                 {observed_call::getcwd, true, ""}};
  EXPECT_EQ(check_observed_inputs(seen, no_coverage()), std::nullopt);
  seen.inputs.push_back({observed_call::getenv, true, "CUCORE_NOT_A_COMPILER_VARIABLE"});
  auto r = check_observed_inputs(seen, no_coverage());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, cucore::cache_skip_reason::unkeyed_input);
  EXPECT_EQ(r->path, "CUCORE_NOT_A_COMPILER_VARIABLE");
  // An absent answer about a per-process name is this process's answer too (stdin closed).
  seen.inputs = {{observed_call::open, false, "/dev/stdin"}};
  r = check_observed_inputs(seen, no_coverage());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, cucore::cache_skip_reason::process_view_input);
  seen.inputs = {{observed_call::side_effect, true, "fopen /tmp/written"}};
  r = check_observed_inputs(seen, no_coverage());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, cucore::cache_skip_reason::process_view_input);
  seen.inputs = {{observed_call::open, true, (dir_ / "unwalked.h").string()}};
  write(dir_ / "unwalked.h", "int x;\n");
  r = check_observed_inputs(seen, no_coverage());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, cucore::cache_skip_reason::unkeyed_input);
  seen.inputs.clear();
  seen.unobserved = "NVRTC's imports could not be patched";
  r = check_observed_inputs(seen, no_coverage());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason, cucore::cache_skip_reason::unkeyed_input);
}

// Observations nest, and inputs observed elsewhere (a compile server's worker) join the ones open
// on this thread.
TEST_F(CompilerObservation, NestedObservationsAndAddedInputs) {
  compiler_observation outer;
  {
    compiler_observation inner;
    observed_inputs remote;
    remote.inputs = {{observed_call::open, true, "/served/header.h"}};
    compiler_observation::add_to_current(remote);
    EXPECT_TRUE(saw(inner.finish(), observed_call::open, "/served/header.h"));
  }
  EXPECT_TRUE(saw(outer.finish(), observed_call::open, "/served/header.h"));
}

// NVRTC's front end writes the pre-include list to a file of its own in TMPDIR and reads it back
// (measured: /tmp/edg0_NNNNN): the compile's own scratch, not an input, so the result is stored.
TEST_F(CompilerObservation, APreIncludeCompileIsStored) {
  write(dir_ / "pre.h", "#pragma once\nconstexpr int pre_value = 4;\n");
  auto o = sm90();
  o.name = (dir_ / "k.cu").string();
  o.pre_include = {(dir_ / "pre.h").string()};
  const auto c = compile_observed("extern \"C\" __global__ void k(int* p) { *p = pre_value; }", o);
  ASSERT_TRUE(c.compiled);
  EXPECT_EQ(refusal_text(c.key.check_store(c.seen)), "stored") << describe(c.seen);
  if (std::getenv("CUCORE_SHOW_OBSERVED") != nullptr)
    std::fprintf(stderr, "%s", describe(c.seen).c_str());
}

// Issue 39's clock gap, defended in depth: __TIME__ and __DATE__ pasted from one-character pieces
// (which the key's scan does not count) and kept as strings. The compile's own clock text is in
// the output (cubin: the bytes; PTX: the decimals of an initialised array), so nothing is stored
// and the second compile is a miss, not the first one's time.
TEST_F(CompilerObservation, AnOutputHoldingItsOwnClockIsNeverStored) {
  const std::string code =
      "#define C8(a, b, c, d, e, f, g, h) a##b##c##d##e##f##g##h\n"
      "__device__ const char stamp[] = C8(_, _, T, I, M, E, _, _);\n"
      "__device__ const char day[] = C8(_, _, D, A, T, E, _, _);\n"
      "extern \"C\" __global__ void k(char* o) {\n"
      "  for (int i = 0; i < 8; ++i) o[i] = stamp[i] + day[i];\n"
      "}\n";
  for (const auto target : {cucore::code_type::cubin, cucore::code_type::ptx}) {
    cucore::in_memory_program_cache cache;
    cucore::program a(code, cucore::source_type::cxx, sm90());
    (void)a.compile(target, {}, &cache);
    EXPECT_EQ(a.last_cache_outcome(), cucore::cache_outcome::miss);
    const auto refusal = a.last_store_refusal();
    ASSERT_TRUE(refusal) << "stored: the pasted clock went unseen";
    EXPECT_EQ(refusal->reason, cucore::cache_skip_reason::time_macros) << refusal->message;
    EXPECT_NE(refusal->message.find("clock"), std::string::npos) << refusal->message;
    cucore::program b(code, cucore::source_type::cxx, sm90());
    (void)b.compile(target, {}, &cache);
    EXPECT_EQ(b.last_cache_outcome(), cucore::cache_outcome::miss);
  }
  // The same program without the clock is stored: a clock text alone is not what refuses it.
  const std::string plain =
      "__device__ const char stamp[] = \"__TIME_\";\n"
      "extern \"C\" __global__ void k(char* o) { o[0] = stamp[0]; }\n";
  cucore::in_memory_program_cache cache;
  cucore::program c(plain, cucore::source_type::cxx, sm90());
  (void)c.compile(cucore::code_type::cubin, {}, &cache);
  EXPECT_FALSE(c.last_store_refusal()) << c.last_store_refusal()->message;
}
