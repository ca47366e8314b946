// Real compiles through NVRTC, libNVVM and nvJitLink: every code type and target, and each option
// shown reaching the compiler through its effect on the output or the log.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using testing::contains;
using testing::kArch;

constexpr const char* kSaxpy = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

program_options arch_only() {
  program_options o;
  o.arch = kArch;
  return o;
}

// Compiles `src` with options adjusted by `mutate`; returns the output and fills `log`.
template <class Mutate>
object_code build(const std::string& src, code_type target, Mutate mutate,
                  std::string* log = nullptr) {
  program_options o = arch_only();
  mutate(o);
  program p(src, source_type::cxx, o);
  auto out = p.compile(target);
  if (log) *log = p.log();
  return out;
}

object_code build(const std::string& src, code_type target) {
  return build(src, target, [](program_options&) {});
}

bool is_elf(const object_code& code) {
  auto b = code.code();
  return b.size() > 4 && b[0] == std::byte{0x7f} && b[1] == std::byte{'E'} &&
         b[2] == std::byte{'L'} && b[3] == std::byte{'F'};
}

// "Used N registers" from ptxas -v; -1 when absent.
int registers_used(const std::string& log) {
  const std::string marker = "Used ";
  for (auto at = log.find(marker); at != std::string::npos; at = log.find(marker, at + 1)) {
    std::size_t end = at + marker.size();
    int value = 0;
    bool digits = false;
    while (end < log.size() && std::isdigit(static_cast<unsigned char>(log[end]))) {
      value = value * 10 + (log[end++] - '0');
      digits = true;
    }
    if (digits && log.compare(end, 10, " registers") == 0) return value;
  }
  return -1;
}

TEST(CxxProgram, CompilesToPtxCubinAndLtoir) {
  auto ptx = build(kSaxpy, code_type::ptx);
  EXPECT_EQ(ptx.type(), code_type::ptx);
  EXPECT_TRUE(contains(ptx.text(), ".entry saxpy"));
  EXPECT_TRUE(contains(ptx.text(), ".target sm_90"));
  EXPECT_EQ(ptx.text().back(), '\n') << "PTX text carries no trailing NUL";

  auto cubin = build(kSaxpy, code_type::cubin);
  EXPECT_EQ(cubin.type(), code_type::cubin);
  EXPECT_TRUE(is_elf(cubin));

  auto ltoir = build(kSaxpy, code_type::ltoir);
  EXPECT_EQ(ltoir.type(), code_type::ltoir);
  EXPECT_GT(ltoir.size(), 0u);
  EXPECT_FALSE(is_elf(ltoir));
  EXPECT_EQ(ltoir.name(), "default_program");
}

TEST(CxxProgram, UnsupportedTargetsAreRefusedBeforeCompiling) {
  program p(kSaxpy, source_type::cxx, arch_only());
  for (auto t : {code_type::fatbin, code_type::object, code_type::library}) {
    EXPECT_THROW(p.compile(t), invalid_argument) << to_string(t);
  }
}

TEST(CxxProgram, SyntaxErrorCarriesLogWithLineNumber) {
  program_options o = arch_only();
  o.name = "broken.cu";
  program p("__global__ void k() {\n  int x = 1;\n  int y = ;\n}\n", source_type::cxx, o);
  try {
    p.compile(code_type::ptx);
    FAIL() << "compiled";
  } catch (const compile_error& e) {
    EXPECT_EQ(e.backend(), "NVRTC");
    EXPECT_TRUE(contains(e.log(), "broken.cu(3): error")) << e.log();
    EXPECT_TRUE(contains(e.what(), "broken.cu(3)"));
    EXPECT_EQ(p.log(), e.log());
  }
}

TEST(CxxProgram, NameExpressionsResolveToMangledNames) {
  const std::string src = R"(
template <class T> __global__ void scale(T* x, T a) { x[threadIdx.x] *= a; }
namespace ns { template <int N> __global__ void fill(int* x) { x[threadIdx.x] = N; } }
)";
  program p(src, source_type::cxx, arch_only());
  std::vector<std::string> names = {"scale<float>", "scale<double>", "ns::fill<3>", "&ns::fill<7>"};
  for (auto target : {code_type::ptx, code_type::cubin}) {
    auto code = p.compile(target, names);
    const auto& map = code.symbol_mapping();
    ASSERT_EQ(map.size(), 4u);
    EXPECT_EQ(map.at("scale<float>"), "_Z5scaleIfEvPT_S0_");
    EXPECT_EQ(map.at("scale<double>"), "_Z5scaleIdEvPT_S0_");
    EXPECT_EQ(map.at("ns::fill<3>"), "_ZN2ns4fillILi3EEEvPi");
    EXPECT_EQ(code.symbol("ns::fill<3>"), "_ZN2ns4fillILi3EEEvPi");
    EXPECT_EQ(code.symbol("not_an_expression"), "not_an_expression");
    if (target == code_type::ptx) {
      for (const auto& [expr, mangled] : map) {
        EXPECT_TRUE(contains(code.text(), ".entry " + mangled)) << expr;
      }
    }
  }
}

TEST(CxxProgram, BadNameExpressionFails) {
  program p("template <class T> __global__ void k(T*) {}", source_type::cxx, arch_only());
  std::vector<std::string> names = {"does_not_exist<float>"};
  EXPECT_THROW(p.compile(code_type::ptx, names), compile_error);
}

TEST(CxxProgram, NameExpressionsOnlyForCxx) {
  program p(testing::data_file("scale.ll"), source_type::nvvm, arch_only());
  std::vector<std::string> names = {"scale"};
  EXPECT_THROW(p.compile(code_type::ptx, names), invalid_argument);
}

TEST(CxxProgram, EmptyCodeIsRefused) {
  EXPECT_THROW(program("", source_type::cxx), invalid_argument);
}

// NVRTC compiles a program named "" as "default_program"; the result carries the name given.
TEST(CxxProgram, EmptyNameCompilesLikeTheDefaultName) {
  program_options o = arch_only();
  o.name = "";
  const object_code unnamed = program(kSaxpy, source_type::cxx, o).compile(code_type::cubin);
  const object_code named =
      program(kSaxpy, source_type::cxx, arch_only()).compile(code_type::cubin);
  EXPECT_EQ(unnamed.name(), "");
  EXPECT_TRUE(std::ranges::equal(unnamed.code(), named.code()));
}

TEST(CxxProgram, MissingArchWithoutGpuIsAClearError) {
  if (toolkit::device_count() > 0) GTEST_SKIP() << "a GPU is present: arch defaults to it";
  program p(kSaxpy, source_type::cxx);
  try {
    p.compile(code_type::ptx);
    FAIL() << "compiled without arch";
  } catch (const invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "no arch given")) << e.what();
    EXPECT_TRUE(contains(e.what(), "sm_90")) << e.what();
  }
}

// ---- each option reaches the compiler -------------------------------------------------------

constexpr const char* kMacroKernel = R"(
extern "C" __global__ void k(int* out) {
#ifdef VALUE
  *out = VALUE;
#else
  *out = 1234567;
#endif
}
)";

TEST(OptionEffects, DefineAndUndefineMacro) {
  auto with = build(kMacroKernel, code_type::ptx, [](auto& o) {
    o.define_macro = {{"VALUE", "4242"}};
  });
  EXPECT_TRUE(contains(with.text(), "4242"));
  auto without = build(kMacroKernel, code_type::ptx);
  EXPECT_TRUE(contains(without.text(), "1234567"));
  auto undone = build(kMacroKernel, code_type::ptx, [](auto& o) {
    o.define_macro = {{"VALUE", "4242"}};
    o.undefine_macro = {"VALUE"};
  });
  EXPECT_TRUE(contains(undone.text(), "1234567"));
}

TEST(OptionEffects, IncludePathAndPreInclude) {
  testing::temp_dir dir;
  testing::write_text(dir / "answer.h", "#define ANSWER 7654321\n");
  const std::string src =
      "#include \"answer.h\"\nextern \"C\" __global__ void k(int* o) { *o = ANSWER; }";
  EXPECT_THROW(build(src, code_type::ptx), compile_error);
  auto found = build(src, code_type::ptx, [&](auto& o) { o.include_path = {dir.path().string()}; });
  EXPECT_TRUE(contains(found.text(), "7654321"));

  const std::string uses = "extern \"C\" __global__ void k(int* o) { *o = ANSWER; }";
  auto pre =
      build(uses, code_type::ptx, [&](auto& o) { o.pre_include = {(dir / "answer.h").string()}; });
  EXPECT_TRUE(contains(pre.text(), "7654321"));
}

TEST(OptionEffects, ToolkitIncludePathAndInMemoryHeaders) {
  // The toolkit's headers (CCCL and include/) compile with no flags, and not with the option off.
  const std::string cccl =
      "#include <cuda/std/cstdint>\n#include <cuda_fp16.h>\n"
      "extern \"C\" __global__ void k(cuda::std::int32_t* o) { *o = 7654322; }";
  EXPECT_TRUE(contains(build(cccl, code_type::ptx).text(), "7654322"));
  EXPECT_TRUE(
      contains(build(cccl, code_type::ptx, [](auto& o) { o.toolkit_include_path = true; }).text(),
               "7654322"));
  EXPECT_THROW(build(cccl, code_type::ptx, [](auto& o) { o.toolkit_include_path = false; }),
               compile_error);

  // In-memory headers, quoted and angle, also nested.
  const std::string src =
      "#include \"answer.h\"\n#include <dir/more.h>\n"
      "extern \"C\" __global__ void k(int* o) { *o = ANSWER + MORE; }";
  auto in_memory = build(src, code_type::ptx, [](auto& o) {
    o.headers = {{"answer.h", "#include \"nested.h\"\n#define ANSWER (NESTED + 1)\n"},
                 {"nested.h", "#define NESTED 7654000\n"},
                 {"dir/more.h", "#define MORE 300\n"}};
  });
  EXPECT_TRUE(contains(in_memory.text(), "7654301")) << in_memory.text();
  EXPECT_THROW(build(src, code_type::ptx), compile_error);
}

TEST(OptionEffects, StdChangesWhatCompiles) {
  const std::string cxx20 = R"(
template <class T> concept small = sizeof(T) <= 4;
template <small T> __global__ void k(T* x) { *x = T{}; }
template __global__ void k<int>(int*);
)";
  EXPECT_THROW(build(cxx20, code_type::ptx, [](auto& o) { o.std = "c++17"; }), compile_error);
  EXPECT_NO_THROW(build(cxx20, code_type::ptx, [](auto& o) { o.std = "c++20"; }));
}

TEST(OptionEffects, LineinfoAddsLocAndDebugAddsDwarf) {
  auto plain = build(kSaxpy, code_type::ptx);
  EXPECT_FALSE(contains(plain.text(), ".loc"));
  auto lines = build(kSaxpy, code_type::ptx, [](auto& o) { o.lineinfo = true; });
  EXPECT_TRUE(contains(lines.text(), ".loc"));
  auto debug = build(kSaxpy, code_type::ptx, [](auto& o) { o.debug = true; });
  EXPECT_TRUE(contains(debug.text(), ".debug_info"));
  EXPECT_FALSE(contains(plain.text(), ".debug_info"));
}

constexpr const char* kRegisterHungry = R"(
extern "C" __global__ void k(const float* in, float* out) {
  float acc[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) acc[i] = in[threadIdx.x * 48 + i];
  float s = 0;
#pragma unroll
  for (int i = 0; i < 48; ++i) s += acc[i] * acc[47 - i] + acc[(i * 7) % 48];
  out[threadIdx.x] = s;
}
)";

TEST(OptionEffects, PtxasOptionsAndMaxRegisterCount) {
  std::string log;
  build(
      kRegisterHungry, code_type::cubin, [](auto& o) { o.ptxas_options = {"-v"}; }, &log);
  const int free_regs = registers_used(log);
  ASSERT_GT(free_regs, 32) << log;  // -v reached ptxas: it printed a register count
  build(
      kRegisterHungry, code_type::cubin,
      [](auto& o) {
        o.ptxas_options = {"-v"};
        o.max_register_count = 32;
      },
      &log);
  const int capped = registers_used(log);
  EXPECT_GT(capped, 0) << log;
  EXPECT_LE(capped, 32) << log;
}

constexpr const char* kMath = R"(
extern "C" __global__ void k(float* x) {
  float v = x[threadIdx.x];
  x[threadIdx.x] = sqrtf(v) / x[1] + v * x[2] + x[3];
}
)";

TEST(OptionEffects, FloatingPointModes) {
  auto ieee = build(kMath, code_type::ptx);
  EXPECT_TRUE(contains(ieee.text(), "sqrt.rn.f32"));
  EXPECT_TRUE(contains(ieee.text(), "div.rn.f32"));
  EXPECT_TRUE(contains(ieee.text(), "fma.rn.f32"));
  EXPECT_FALSE(contains(ieee.text(), ".ftz."));

  auto ftz = build(kMath, code_type::ptx, [](auto& o) { o.ftz = true; });
  EXPECT_TRUE(contains(ftz.text(), ".ftz."));
  auto approx_sqrt = build(kMath, code_type::ptx, [](auto& o) { o.prec_sqrt = false; });
  EXPECT_TRUE(contains(approx_sqrt.text(), "sqrt.approx"));
  auto approx_div = build(kMath, code_type::ptx, [](auto& o) { o.prec_div = false; });
  EXPECT_FALSE(contains(approx_div.text(), "div.rn.f32"));
  auto no_fma = build(kMath, code_type::ptx, [](auto& o) { o.fma = false; });
  EXPECT_FALSE(contains(no_fma.text(), "fma.rn.f32"));
  auto fast = build(kMath, code_type::ptx, [](auto& o) { o.use_fast_math = true; });
  EXPECT_TRUE(contains(fast.text(), "approx"));
  EXPECT_TRUE(contains(fast.text(), ".ftz."));
}

constexpr const char* kWarns = "extern \"C\" __global__ void k(int* o) { int unused; *o = 1; }";

TEST(OptionEffects, DiagnosticControls) {
  std::string log;
  build(
      kWarns, code_type::ptx, [](auto&) {}, &log);
  EXPECT_TRUE(contains(log, "#177-D")) << log;
  build(
      kWarns, code_type::ptx, [](auto& o) { o.disable_warnings = true; }, &log);
  EXPECT_FALSE(contains(log, "unused")) << log;
  build(
      kWarns, code_type::ptx, [](auto& o) { o.diag_suppress = {177}; }, &log);
  EXPECT_FALSE(contains(log, "unused")) << log;
  build(
      kWarns, code_type::ptx, [](auto& o) { o.no_display_error_number = true; }, &log);
  EXPECT_TRUE(contains(log, "unused")) << log;
  EXPECT_FALSE(contains(log, "#177")) << log;
  EXPECT_THROW(build(kWarns, code_type::ptx, [](auto& o) { o.diag_error = {177}; }), compile_error);
  build(
      kWarns, code_type::ptx,
      [](auto& o) {
        o.diag_suppress = {177};
        o.diag_warn = {177};
      },
      &log);
  EXPECT_TRUE(contains(log, "unused")) << log;
}

TEST(OptionEffects, RelocatableDeviceCode) {
  const std::string src = R"(
extern __device__ int helper(int);
extern "C" __global__ void k(int* o) { *o = helper(*o); }
)";
  EXPECT_THROW(build(src, code_type::ptx), compile_error);  // whole-program: undefined helper
  auto rdc = build(src, code_type::ptx, [](auto& o) { o.relocatable_device_code = true; });
  EXPECT_TRUE(contains(rdc.text(), ".extern .func"));
}

TEST(OptionEffects, DeviceAsDefaultExecutionSpace) {
  const std::string src =
      "int twice(int x) { return 2 * x; }\n"
      "extern \"C\" __global__ void k(int* o) { *o = twice(*o); }";
  EXPECT_THROW(build(src, code_type::ptx), compile_error);
  EXPECT_NO_THROW(
      build(src, code_type::ptx, [](auto& o) { o.device_as_default_execution_space = true; }));
}

// extra_nvrtc_options reach NVRTC as given, after the fields: -jtd=0 (a jump table for any switch)
// turns a dense switch into brx.idx, in either spelling NVRTC takes; the element after -Xnvvm is
// libNVVM's; an option NVRTC does not know fails with NVRTC's own message.
TEST(OptionEffects, ExtraNvrtcOptionsReachNvrtc) {
  const std::string src = testing::data_file("dense_switch.cu");
  EXPECT_FALSE(contains(build(src, code_type::ptx).text(), "brx.idx"));
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"-jtd=0"},
        std::vector<std::string>{"--jump-table-density", "0"}}) {
    SCOPED_TRACE(extra.front());
    const auto ptx = build(src, code_type::ptx, [&](auto& o) { o.extra_nvrtc_options = extra; });
    EXPECT_TRUE(contains(ptx.text(), "brx.idx")) << ptx.text();
  }
  try {
    build(kSaxpy, code_type::ptx, [](auto& o) {
      o.extra_nvrtc_options = {"-Xnvvm", "-no-such-nvvm-option"};
    });
    FAIL() << "libNVVM accepted an unknown option";
  } catch (const compile_error& e) {
    EXPECT_TRUE(contains(e.log(), "-no-such-nvvm-option")) << e.log();
  }
  try {
    build(kSaxpy, code_type::ptx, [](auto& o) { o.extra_nvrtc_options = {"--no-such-option"}; });
    FAIL() << "NVRTC accepted an unknown option";
  } catch (const compile_error& e) {
    EXPECT_EQ(e.status(), "NVRTC_ERROR_INVALID_OPTION");
    EXPECT_TRUE(contains(e.log(), "unrecognized option --no-such-option")) << e.log();
  }
  // Refused before NVRTC is asked: an option a field covers.
  EXPECT_THROW(
      build(kSaxpy, code_type::ptx, [](auto& o) { o.extra_nvrtc_options = {"-default-device"}; }),
      invalid_argument);
}

TEST(OptionEffects, SideEffectFilesAreWritten) {
  testing::temp_dir dir;
  auto time_file = dir / "time.csv";
  auto trace_file = dir / "trace.json";
  build(kSaxpy, code_type::ptx, [&](auto& o) {
    o.time = time_file.string();
    o.fdevice_time_trace = trace_file.string();
  });
  EXPECT_TRUE(std::filesystem::exists(time_file));
  // NVRTC appends ".json" to the trace name it is given.
  EXPECT_TRUE(std::filesystem::exists(trace_file) ||
              std::filesystem::exists(trace_file.string() + ".json"));
}

TEST(OptionEffects, FlagsNvrtcRejectsComeBackAsItsError) {
  // The flag reaches NVRTC, which names it: --device-float128 needs sm_100+, and CUDA 13.0's NVRTC
  // does not know --numba-debug.
  try {
    build(kSaxpy, code_type::ptx, [](auto& o) { o.device_float128 = true; });
    FAIL();
  } catch (const compile_error& e) {
    EXPECT_TRUE(contains(e.log(), "float128")) << e.log();
  }
  EXPECT_NO_THROW(build(kSaxpy, code_type::ptx, [](auto& o) {
    o.arch = "sm_100";
    o.device_float128 = true;
  }));
  try {
    build(kSaxpy, code_type::ptx, [](auto& o) { o.numba_debug = true; });
    FAIL();
  } catch (const compile_error& e) {
    EXPECT_TRUE(contains(e.log(), "numba-debug")) << e.log();
  }
}

// Options without a cheap observable effect: NVRTC accepts each flag (an unknown or malformed flag
// would fail with NVRTC_ERROR_INVALID_OPTION), so each one reached and was parsed by the compiler.
TEST(OptionEffects, EveryRemainingFlagIsAcceptedByNvrtc) {
  testing::temp_dir dir;
  std::vector<std::pair<const char*, std::function<void(program_options&)>>> cases = {
      {"extensible_whole_program", [](auto& o) { o.extensible_whole_program = true; }},
      {"device_code_optimize", [](auto& o) { o.device_code_optimize = true; }},
      {"extra_device_vectorization", [](auto& o) { o.extra_device_vectorization = true; }},
      {"gen_opt_lto", [](auto& o) { o.gen_opt_lto = true; }},
      {"no_source_include", [](auto& o) { o.no_source_include = true; }},
      {"builtin_move_forward", [](auto& o) { o.builtin_move_forward = false; }},
      {"builtin_initializer_list", [](auto& o) { o.builtin_initializer_list = false; }},
      {"restrict", [](auto& o) { o.restrict = true; }},
      {"device_int128", [](auto& o) { o.device_int128 = true; }},
      {"optimization_info", [](auto& o) { o.optimization_info = "inline"; }},
      {"brief_diagnostics", [](auto& o) { o.brief_diagnostics = true; }},
      {"split_compile", [](auto& o) { o.split_compile = 2; }},
      {"minimal", [](auto& o) { o.minimal = true; }},
      {"no_cache", [](auto& o) { o.no_cache = true; }},
      {"frandom_seed", [](auto& o) { o.frandom_seed = "42"; }},
      {"ofast_compile", [](auto& o) { o.ofast_compile = "max"; }},
      {"link_time_optimization", [](auto& o) { o.link_time_optimization = true; }},
      {"pch_verbose",
       [&](auto& o) {
         o.pch = true;
         o.pch_dir = dir.path().string();
         o.pch_verbose = true;
       }},
      {"pch_messages",
       [&](auto& o) {
         o.pch = true;
         o.pch_dir = dir.path().string();
         o.pch_messages = false;
       }},
      {"instantiate_templates_in_pch",
       [&](auto& o) {
         o.pch = true;
         o.pch_dir = dir.path().string();
         o.instantiate_templates_in_pch = true;
       }},
  };
  for (auto& [name, mutate] : cases) {
    SCOPED_TRACE(name);
    // Both make LTO-IR and no PTX (an empty PTX is an error: TargetNvrtcDidNotProduce...).
    const bool lto =
        std::string(name) == "gen_opt_lto" || std::string(name) == "link_time_optimization";
    code_type target = lto ? code_type::ltoir : code_type::ptx;
    EXPECT_NO_THROW(build(kSaxpy, target, mutate));
  }
  // ... and a flag with an invalid value is refused by NVRTC, proving values get through.
  EXPECT_THROW(build(kSaxpy, code_type::ptx, [](auto& o) { o.std = "c++03x"; }), compile_error);
}

// A target NVRTC did not produce (it reports success with a 0-byte PTX) is an error naming the
// option that caused it, never an empty object (which a cache would keep).
TEST(OptionEffects, TargetNvrtcDidNotProduceIsAnErrorNamingTheOption) {
  try {
    (void)build(kSaxpy, code_type::ptx, [](auto& o) { o.link_time_optimization = true; });
    ADD_FAILURE() << "an empty PTX was returned";
  } catch (const compile_error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "\"--dlink-time-opt\" compiled to LTO-IR only")) << what;
    EXPECT_TRUE(contains(what, "request the ltoir target")) << what;
  }
}

// NVRTC 13.1+ (13.0 refuses the option): -tile-only compiles Tile code only and reports success
// with an empty PTX (its cubin and LTO-IR getters fail). Run it with CUDA_HOME naming a newer NVRTC
// (the nvidia-cuda-nvrtc 13.5 wheel's nvidia/cu13); tile_test runs it on NVRTC 13.5 always.
TEST(OptionEffects, TileOnlyIsAnErrorNamingIt) {
  if (toolkit::nvrtc_version() < version{13, 1})
    GTEST_SKIP() << "NVRTC before 13.1 has no Tile code";
  for (const auto target : {code_type::ptx, code_type::cubin}) {
    SCOPED_TRACE(std::string(to_string(target)));
    try {
      (void)build(kSaxpy, target, [](auto& o) {
        o.arch = "sm_100";
        o.tile_only = true;
      });
      ADD_FAILURE() << "an empty output was returned";
    } catch (const compile_error& e) {
      EXPECT_TRUE(contains(e.what(), "\"--tile-only\" compiled only Tile code")) << e.what();
    }
  }
}

TEST(OptionEffects, FdeviceSyntaxOnlyEmitsNoCode) {
  auto out = build(kSaxpy, code_type::ptx, [](auto& o) { o.fdevice_syntax_only = true; });
  EXPECT_FALSE(contains(out.text(), ".entry saxpy"));
}

// ---- precompiled headers --------------------------------------------------------------------

constexpr const char* kPchSource = R"(
#include "big.h"
extern "C" __global__ void k(int* o) { *o = big_value<3>(); }
)";

std::string big_header() {
  std::string h = "#pragma once\n";
  for (int i = 0; i < 400; ++i) {
    h += "template <int N> __device__ int f" + std::to_string(i) + "() { return N + " +
         std::to_string(i) + "; }\n";
  }
  h += "template <int N> __device__ int big_value() { return f0<N>() + f399<N>(); }\n";
  return h;
}

TEST(Pch, CreateAndUseReportsStatus) {
  testing::temp_dir dir;
  testing::write_text(dir / "big.h", big_header());
  auto mutate = [&](program_options& o) {
    o.include_path = {dir.path().string()};
    o.create_pch = (dir / "big.pch").string();
  };
  program_options o = arch_only();
  mutate(o);
  program p(kPchSource, source_type::cxx, o);
  auto ptx = p.compile(code_type::ptx);
  EXPECT_EQ(p.last_pch_status(), pch_status::created) << p.log();
  EXPECT_TRUE(std::filesystem::exists(dir / "big.pch"));

  program_options use = arch_only();
  use.include_path = {dir.path().string()};
  use.use_pch = (dir / "big.pch").string();
  program q(kPchSource, source_type::cxx, use);
  auto again = q.compile(code_type::ptx);
  EXPECT_TRUE(contains(again.text(), ".entry k"));
  EXPECT_EQ(q.last_pch_status(), pch_status::not_requested);
}

TEST(Pch, HeapExhaustionIsRetriedWithTheRequiredSize) {
  testing::temp_dir dir;
  testing::write_text(dir / "big.h", big_header());
  const std::size_t original = nvrtc_pch_heap_size();
  set_nvrtc_pch_heap_size(1 << 16);  // far too small for the header's PCH
  program_options o = arch_only();
  o.include_path = {dir.path().string()};
  o.create_pch = (dir / "big.pch").string();
  program p(kPchSource, source_type::cxx, o);
  auto ptx = p.compile(code_type::ptx);
  EXPECT_EQ(p.last_pch_status(), pch_status::created) << p.log();
  EXPECT_GT(nvrtc_pch_heap_size(), std::size_t{1 << 16}) << "the heap was grown to fit";
  set_nvrtc_pch_heap_size(original);
}

// ---- NVVM IR ----------------------------------------------------------------------------------

TEST(NvvmProgram, TextIrToPtxAndLtoir) {
  program p(testing::data_file("scale.ll"), source_type::nvvm, arch_only());
  auto ptx = p.compile(code_type::ptx);
  EXPECT_EQ(ptx.type(), code_type::ptx);
  EXPECT_TRUE(contains(ptx.text(), ".entry scale"));
  EXPECT_TRUE(contains(ptx.text(), ".target sm_90"));
  auto lto = p.compile(code_type::ltoir);
  EXPECT_EQ(lto.type(), code_type::ltoir);
  EXPECT_GT(lto.size(), 0u);
  EXPECT_THROW(p.compile(code_type::cubin), invalid_argument);
}

TEST(NvvmProgram, LibdeviceResolvesMathCalls) {
  const auto ir = testing::data_file("scale_sqrt.ll");
  auto without = program(ir, source_type::nvvm, arch_only()).compile(code_type::ptx);
  EXPECT_TRUE(contains(without.text(), ".extern .func")) << "__nv_sqrtf left unresolved";
  program_options o = arch_only();
  o.use_libdevice = true;
  auto with = program(ir, source_type::nvvm, o).compile(code_type::ptx);
  EXPECT_FALSE(contains(with.text(), "__nv_sqrtf"));
  EXPECT_TRUE(contains(with.text(), "sqrt.rn.f32"));
}

TEST(NvvmProgram, ExtraSourcesAreLinkedIn) {
  const auto main_ir = testing::data_file("uses_helper.ll");
  program_options o = arch_only();
  o.extra_sources = {{"helper", testing::data_file("helper_module.ll")}};
  auto ptx = program(main_ir, source_type::nvvm, o).compile(code_type::ptx);
  EXPECT_TRUE(contains(ptx.text(), ".entry twice"));
  EXPECT_FALSE(contains(ptx.text(), ".extern .func")) << "helper_twice was defined by the module";
}

TEST(NvvmProgram, OptionsReachLibNvvm) {
  const auto ir = testing::data_file("scale.ll");
  auto optimized = program(ir, source_type::nvvm, arch_only()).compile(code_type::ptx);
  program_options o = arch_only();
  o.device_code_optimize = false;
  auto unoptimized = program(ir, source_type::nvvm, o).compile(code_type::ptx);
  EXPECT_NE(optimized.text(), unoptimized.text()) << "-opt=0 reached libNVVM";
  program_options debug = arch_only();
  debug.debug = true;  // accepted (the IR has no debug metadata, so the PTX does not change)
  EXPECT_NO_THROW(program(ir, source_type::nvvm, debug).compile(code_type::ptx));
  program_options ftz = arch_only();
  ftz.ftz = true;
  auto f = program(testing::data_file("scale.ll"), source_type::nvvm, ftz).compile(code_type::ptx);
  EXPECT_TRUE(contains(f.text(), "mul.ftz.f32"));
}

TEST(NvvmProgram, InvalidIrIsACompileErrorWithLog) {
  program p("this is not llvm ir", source_type::nvvm, arch_only());
  try {
    p.compile(code_type::ptx);
    FAIL();
  } catch (const compile_error& e) {
    EXPECT_EQ(e.backend(), "NVVM");
    EXPECT_FALSE(e.log().empty());
  }
}

// ---- PTX --------------------------------------------------------------------------------------

TEST(PtxProgram, PtxToCubin) {
  auto ptx = build(kSaxpy, code_type::ptx);
  program_options o = arch_only();
  o.name = "saxpy.ptx";
  program p(std::string(ptx.text()), source_type::ptx, o);
  EXPECT_EQ(p.backend(), compiler_backend::nvjitlink);
  auto cubin = p.compile(code_type::cubin);
  EXPECT_EQ(cubin.type(), code_type::cubin);
  EXPECT_TRUE(is_elf(cubin));
  EXPECT_EQ(cubin.name(), "saxpy.ptx");
  EXPECT_THROW(p.compile(code_type::ptx), invalid_argument);
  EXPECT_THROW(p.compile(code_type::ltoir), invalid_argument);
}

TEST(PtxProgram, OptionsReachTheLinker) {
  auto ptx = build(kRegisterHungry, code_type::ptx);
  program_options o = arch_only();
  o.ptxas_options = {"-v"};
  program verbose(std::string(ptx.text()), source_type::ptx, o);
  verbose.compile(code_type::cubin);
  const int free_regs = registers_used(verbose.log());
  ASSERT_GT(free_regs, 32) << verbose.log();
  o.max_register_count = 32;
  program capped(std::string(ptx.text()), source_type::ptx, o);
  capped.compile(code_type::cubin);
  EXPECT_LE(registers_used(capped.log()), 32) << capped.log();
}

TEST(PtxProgram, BadPtxIsACompileError) {
  program p(".version 9.0\n.target sm_90\n.address_size 64\n.entry k( { bogus }", source_type::ptx,
            arch_only());
  try {
    p.compile(code_type::cubin);
    FAIL();
  } catch (const compile_error& e) {
    EXPECT_EQ(e.backend(), "nvJitLink");
    EXPECT_FALSE(e.log().empty());
    EXPECT_EQ(p.log(), e.log());
  }
}

TEST(PtxProgram, CxxOnlyOptionsAreRefused) {
  program_options o = arch_only();
  o.std = "c++17";
  program p(".version 9.0\n.target sm_90\n.address_size 64\n", source_type::ptx, o);
  EXPECT_THROW(p.compile(code_type::cubin), invalid_argument);
}

}  // namespace
}  // namespace cucore
