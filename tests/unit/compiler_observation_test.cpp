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
