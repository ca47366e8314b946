// Linking with nvJitLink: LTO across separately compiled sources, PTX and cubin inputs.
#include <gtest/gtest.h>

#include "cucore/error.hpp"
#include "cucore/linker.hpp"
#include "cucore/program.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using testing::contains;
using testing::kArch;

object_code compile_cxx(const std::string& src, code_type target, bool rdc = false,
                        const std::string& name = "default_program") {
  program_options o;
  o.arch = kArch;
  o.name = name;
  if (rdc) o.relocatable_device_code = true;
  return program(src, source_type::cxx, o).compile(target);
}

constexpr const char* kCaller = R"(
extern __device__ float helper(float);
extern "C" __global__ void k(float* x) { x[threadIdx.x] = helper(x[threadIdx.x]); }
)";
constexpr const char* kCallee = "__device__ float helper(float v) { return v * 3.0f + 1.0f; }";

TEST(Linker, LtoLinksTwoSourcesToCubin) {
  auto a = compile_cxx(kCaller, code_type::ltoir, true, "caller.cu");
  auto b = compile_cxx(kCallee, code_type::ltoir, true, "callee.cu");
  linker_options o;
  o.arch = kArch;
  o.link_time_optimization = true;
  linker l({a, b}, o);
  EXPECT_EQ(l.backend(), linker_backend::nvjitlink);
  auto cubin = l.link(code_type::cubin);
  EXPECT_EQ(cubin.type(), code_type::cubin);
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(cubin.code()[0], std::byte{0x7f});

  // LTO-IR can also be linked to PTX, where the callee is inlined across the module boundary.
  linker to_ptx({a, b}, o);
  auto ptx = to_ptx.link(code_type::ptx);
  EXPECT_TRUE(contains(ptx.text(), ".entry k"));
  EXPECT_FALSE(contains(ptx.text(), "helper")) << "LTO inlined the callee";
}

TEST(Linker, MissingDefinitionIsACompileErrorWithLog) {
  auto a = compile_cxx(kCaller, code_type::ltoir, true);
  linker_options o;
  o.arch = kArch;
  o.link_time_optimization = true;
  linker l({a}, o);
  try {
    l.link(code_type::cubin);
    FAIL() << "linked without the callee";
  } catch (const compile_error& e) {
    EXPECT_EQ(e.backend(), "nvJitLink");
    EXPECT_TRUE(contains(e.log(), "helper")) << e.log();
    EXPECT_EQ(l.log(), e.log());
  }
}

TEST(Linker, RelocatablePtxAndCubinInputs) {
  auto caller = compile_cxx(kCaller, code_type::ptx, true);
  auto callee = compile_cxx(kCallee, code_type::cubin, true);
  linker_options o;
  o.arch = kArch;
  auto cubin = linker({caller, callee}, o).link(code_type::cubin);
  EXPECT_EQ(cubin.type(), code_type::cubin);
}

TEST(Linker, RefusesBadTargetsAndEmptyInput) {
  EXPECT_THROW(linker({}, {}), invalid_argument);
  auto ptx = compile_cxx(kCallee, code_type::ptx, true);
  linker l({ptx}, {});
  EXPECT_THROW(l.link(code_type::ltoir), invalid_argument);
  EXPECT_THROW(l.link(code_type::fatbin), invalid_argument);
}

TEST(Linker, PtxOutputNeedsLtoInputs) {
  auto ptx = compile_cxx(kCallee, code_type::ptx, true);
  linker_options o;
  o.arch = kArch;
  o.link_time_optimization = true;
  EXPECT_THROW(linker({ptx}, o).link(code_type::ptx), compile_error);
}

TEST(Linker, BackendIsNvJitLinkHere) {
  EXPECT_EQ(linker::which_backend(), linker_backend::nvjitlink);
  EXPECT_EQ(to_string(linker::which_backend()), "nvJitLink");
}

}  // namespace
}  // namespace cucore
