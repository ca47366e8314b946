// Flag emission: one function, one fixed order, every field, and the per-backend gates.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>

#include "cucore/error.hpp"
#include "cucore/options.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"

namespace cucore {
namespace {

program_options with_arch() {
  program_options o;
  o.arch = "sm_90";
  return o;
}

// NVRTC's flags for `o`; without the toolkit's include directories unless the test sets
// toolkit_include_path (they depend on where the toolkit is installed).
std::vector<std::string> nvrtc(const program_options& o, code_type t = code_type::ptx) {
  program_options without_toolkit = o;
  if (!without_toolkit.toolkit_include_path) without_toolkit.toolkit_include_path = false;
  return compiler_flags(without_toolkit, source_type::cxx, t);
}

// The flags that search the toolkit's include directories, in order.
std::vector<std::string> toolkit_include_flags() {
  std::vector<std::string> out;
  for (const auto& dir : toolkit::include_directories()) out.push_back("--include-path=" + dir);
  return out;
}

TEST(ProgramOptions, DefaultsEmitOnlyArch) {
  EXPECT_EQ(nvrtc(with_arch()), std::vector<std::string>{"-arch=sm_90"});
}

TEST(ProgramOptions, EveryNvrtcFieldInTheReferenceOrder) {
  program_options o = with_arch();
  o.relocatable_device_code = true;
  o.extensible_whole_program = true;
  o.debug = true;
  o.lineinfo = true;
  o.device_code_optimize = true;
  o.ptxas_options = {"-v", "-O2"};
  o.max_register_count = 32;
  o.ftz = true;
  o.prec_sqrt = false;
  o.prec_div = false;
  o.fma = true;
  o.use_fast_math = true;
  o.extra_device_vectorization = true;
  o.link_time_optimization = true;
  o.gen_opt_lto = true;
  o.define_macro = {"A", macro("B", "2")};
  o.undefine_macro = {"C"};
  o.include_path = {"/inc"};
  o.pre_include = {"pre.h"};
  o.no_source_include = true;
  o.toolkit_include_path = true;
  o.headers = {{"h.cuh", "#define H 1"}};  // given to nvrtcCreateProgram: no flag
  o.std = "c++17";
  o.builtin_move_forward = false;
  o.builtin_initializer_list = true;
  o.disable_warnings = true;
  o.restrict = true;
  o.device_as_default_execution_space = true;
  o.device_int128 = true;
  o.device_float128 = true;
  o.optimization_info = "inline";
  o.no_display_error_number = true;
  o.diag_error = {1, 2};
  o.diag_suppress = {177};
  o.diag_warn = {3};
  o.brief_diagnostics = true;
  o.time = "t.csv";
  o.split_compile = 4;
  o.fdevice_syntax_only = true;
  o.minimal = true;
  o.no_cache = true;
  o.fdevice_time_trace = "trace.json";
  o.frandom_seed = "7";
  o.ofast_compile = "min";
  o.pch = true;
  o.create_pch = "a.pch";
  o.use_pch = "b.pch";
  o.pch_dir = "/pch";
  o.pch_verbose = true;
  o.pch_messages = false;
  o.instantiate_templates_in_pch = true;
  o.numba_debug = true;
  o.warning_as_error = {"reorder", "conversion"};
  o.wreorder = true;
  o.enable_tile = true;
  o.tile_only = true;
  o.simt_only = true;
  o.default_tile = true;
  o.diagnose_implicit_tile_var = true;
  o.extra_nvrtc_options = {"-jtd=50", "--device-stack-protector=true"};
  std::vector<std::string> expected = {
      "-arch=sm_90",
      "--relocatable-device-code=true",
      "--extensible-whole-program",
      "--device-debug",
      "--generate-line-info",
      "--dopt=on",
      "--ptxas-options=-v",
      "--ptxas-options=-O2",
      "--maxrregcount=32",
      "--ftz=true",
      "--prec-sqrt=false",
      "--prec-div=false",
      "--fmad=true",
      "--use_fast_math",
      "--extra-device-vectorization",
      "--dlink-time-opt",
      "--gen-opt-lto",
      "--define-macro=A",
      "--define-macro=B=2",
      "--undefine-macro=C",
      "--include-path=/inc",
      "--pre-include=pre.h",
      "--no-source-include",
      "--std=c++17",
      "--builtin-move-forward=false",
      "--builtin-initializer-list=true",
      "--disable-warnings",
      "--restrict",
      "--device-as-default-execution-space",
      "--device-int128",
      "--device-float128",
      "--optimization-info=inline",
      "--no-display-error-number",
      "--diag-error=1,2",
      "--diag-suppress=177",
      "--diag-warn=3",
      "--brief-diagnostics=true",
      "--time=t.csv",
      "--split-compile=4",
      "--fdevice-syntax-only",
      "--minimal",
      "--no-cache",
      "--fdevice-time-trace=trace.json",
      "--frandom-seed=7",
      "--Ofast-compile=min",
      "--pch",
      "--create-pch=a.pch",
      "--use-pch=b.pch",
      "--pch-dir=/pch",
      "--pch-verbose=true",
      "--pch-messages=false",
      "--instantiate-templates-in-pch=true",
      "--numba-debug",
      "--warning-as-error=reorder,conversion",
      "--Wreorder",
      "--enable-tile",
      "--tile-only",
      "--simt-only",
      "-default-tile",  // NVRTC 13.5 takes only one dash here
      "--diagnose-implicit-tile-var",
      "-jtd=50",
      "--device-stack-protector=true",
  };
  // The toolkit's directories right after the user's.
  const auto toolkit_flags = toolkit_include_flags();
  const auto user = std::find(expected.begin(), expected.end(), "--include-path=/inc");
  expected.insert(user + 1, toolkit_flags.begin(), toolkit_flags.end());
  EXPECT_EQ(nvrtc(o), expected);
}

TEST(ProgramOptions, ToolkitIncludeDirectoriesFollowTheUsersIncludePath) {
  const auto toolkit_flags = toolkit_include_flags();
  ASSERT_FALSE(toolkit_flags.empty()) << "NVRTC is not under a CUDA root";
  // Unset (the default) and true: after the user's -I directories, before -include.
  for (const std::optional<bool> setting : {std::optional<bool>(), std::optional<bool>(true)}) {
    program_options o = with_arch();
    o.toolkit_include_path = setting;
    std::vector<std::string> alone = {"-arch=sm_90"};
    alone.insert(alone.end(), toolkit_flags.begin(), toolkit_flags.end());
    EXPECT_EQ(compiler_flags(o, source_type::cxx, code_type::ptx), alone);
    o.include_path = {"/mine/a", "/mine/b"};
    o.pre_include = {"pre.h"};
    std::vector<std::string> expected = {"-arch=sm_90", "--include-path=/mine/a",
                                         "--include-path=/mine/b"};
    expected.insert(expected.end(), toolkit_flags.begin(), toolkit_flags.end());
    expected.push_back("--pre-include=pre.h");
    EXPECT_EQ(compiler_flags(o, source_type::cxx, code_type::ptx), expected);
  }
  // false: none of them.
  program_options o = with_arch();
  o.toolkit_include_path = false;
  o.include_path = {"/mine/a"};
  EXPECT_EQ(compiler_flags(o, source_type::cxx, code_type::ptx),
            (std::vector<std::string>{"-arch=sm_90", "--include-path=/mine/a"}));
  // The toolkit's include/cccl and include directories, in that order, which exist.
  ASSERT_EQ(toolkit::include_directories().size(), 2u);
  EXPECT_TRUE(toolkit::include_directories()[0].ends_with("/include/cccl"));
  EXPECT_TRUE(toolkit::include_directories()[1].ends_with("/include"));
  for (const auto& dir : toolkit::include_directories()) {
    EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
  }
  EXPECT_TRUE(std::filesystem::exists(toolkit::include_directories().back() + "/cuda_runtime.h"));
}

TEST(ProgramOptions, ToolkitIncludePathAndHeadersAreCxxOnly) {
  program_options o = with_arch();
  o.toolkit_include_path = false;
  EXPECT_THROW(compiler_flags(o, source_type::nvvm, code_type::ptx), invalid_argument);
  EXPECT_THROW(compiler_flags(o, source_type::ptx, code_type::cubin), invalid_argument);
  o = with_arch();
  o.headers = {{"h.cuh", ""}};
  EXPECT_THROW(compiler_flags(o, source_type::nvvm, code_type::ptx), invalid_argument);
  EXPECT_THROW(compiler_flags(o, source_type::ptx, code_type::cubin), invalid_argument);
}

TEST(ProgramOptions, MalformedInMemoryHeadersAreRefused) {
  auto refused = [](std::vector<include_header> headers, const char* needle) {
    program_options o = with_arch();
    o.headers = std::move(headers);
    try {
      nvrtc(o);
      ADD_FAILURE() << "accepted; expected an error naming " << needle;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused({{"", "x"}}, "headers[0]");
  refused({{"a.h", "x"}, {"a\nb.h", "y"}}, "headers[1]");
  refused({{std::string("a\0b", 3), "x"}}, "headers[0]");
  refused({{"a.h", std::string("x\0y", 3)}}, "NUL");
  refused({{"a.h", "x"}, {"a.h", "y"}}, "repeats");
  program_options fine = with_arch();
  fine.headers = {{"a.h", ""}, {"dir/b.h", "#pragma once\n"}};
  EXPECT_EQ(nvrtc(fine), std::vector<std::string>{"-arch=sm_90"});
}

TEST(ProgramOptions, FalseBooleansFollowTheReference) {
  program_options o = with_arch();
  o.debug = false;  // truthy-only flags vanish
  o.use_fast_math = false;
  o.device_code_optimize = false;
  o.relocatable_device_code = false;  // not-none flags say false
  o.ftz = false;
  EXPECT_EQ(nvrtc(o), (std::vector<std::string>{"-arch=sm_90", "--relocatable-device-code=false",
                                                "--ftz=false"}));
}

TEST(ProgramOptions, LtoirTargetAddsDlto) {
  auto flags = nvrtc(with_arch(), code_type::ltoir);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), "--dlink-time-opt"), 1);
  program_options o = with_arch();
  o.link_time_optimization = true;
  flags = nvrtc(o, code_type::ltoir);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), "--dlink-time-opt"), 1);
}

TEST(ProgramOptions, MalformedValuesAreRefusedByName) {
  auto refused = [](auto mutate, const char* needle) {
    program_options o = with_arch();
    mutate(o);
    try {
      nvrtc(o);
      ADD_FAILURE() << "accepted; expected an error naming " << needle;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused([](auto& o) { o.arch = "90"; }, "arch");
  refused([](auto& o) { o.arch = "sm_9"; }, "sm_XY");
  refused([](auto& o) { o.arch = "sm_90z"; }, "sm_90z");
  refused([](auto& o) { o.max_register_count = 0; }, "max_register_count");
  refused([](auto& o) { o.std = ""; }, "std");
  refused([](auto& o) { o.define_macro = {"A=1"}; }, "macro{");
  refused([](auto& o) { o.diag_suppress = {-1}; }, "diag_suppress");
  refused([](auto& o) { o.ofast_compile = "fast"; }, "ofast_compile");
  refused([](auto& o) { o.include_path = {""}; }, "include_path");
  refused([](auto& o) { o.extra_sources = {{"m", "x"}}; }, "extra_sources");
  refused([](auto& o) { o.use_libdevice = true; }, "use_libdevice");
  refused([](auto& o) { o.warning_as_error = {""}; }, "warning_as_error");
  refused([](auto& o) { o.warning_as_error = {"reorder,conversion"}; }, "its own element");
}

// extra_nvrtc_options: verbatim and last; every spelling of an option a field covers is refused,
// naming the field (and the command line's option), so each setting has one canonical flag.
TEST(ProgramOptions, ExtraNvrtcOptionsComeLastAsGiven) {
  program_options o = with_arch();
  o.std = "c++17";
  o.extra_nvrtc_options = {
      "--jump-table-density",       "50",           "-device-stack-protector=true",
      "--modify-stack-limit=false", "-err-no",      "-Xcudafe",
      "--diag_suppress=177",        "-Xnvvm=-opt=3"};
  std::vector<std::string> expected = {"-arch=sm_90", "--std=c++17"};
  expected.insert(expected.end(), o.extra_nvrtc_options.begin(), o.extra_nvrtc_options.end());
  EXPECT_EQ(nvrtc(o), expected);
}

TEST(ProgramOptions, ExtraNvrtcOptionsThatAFieldCoversAreRefusedNamingTheField) {
  struct row {
    const char* option;
    const char* field;
    const char* cli;
  };
  const row rows[] = {
      {"-std=c++20", "program_options::std", "--std"},
      {"--std=c++20", "program_options::std", "--std"},
      {"-arch=sm_80", "program_options::arch", "--arch"},
      {"--gpu-architecture=sm_80", "program_options::arch", "--arch"},
      {"-DX=1", "program_options::define_macro", "-D"},
      {"-D", "program_options::define_macro", "-D"},
      {"--define-macro=X", "program_options::define_macro", "-D"},
      {"-UX", "program_options::undefine_macro", "-U"},
      {"-I/usr/include", "program_options::include_path", "-I"},
      {"-I /tmp", "program_options::include_path", "-I"},
      {"--include-path=/tmp", "program_options::include_path", "-I"},
      {"-include=x.h", "program_options::pre_include", "--pre-include"},
      {"--pre-include=x.h", "program_options::pre_include", "--pre-include"},
      {"-no-source-include", "program_options::no_source_include", "--no-source-include"},
      {"-G", "program_options::debug", "-G"},
      {"-lineinfo", "program_options::lineinfo", "--lineinfo"},
      {"-rdc=true", "program_options::relocatable_device_code", "--rdc"},
      {"-dc", "program_options::relocatable_device_code", "--rdc"},
      {"-dlto", "program_options::link_time_optimization", "--dlink-time-opt"},
      {"--use_fast_math", "program_options::use_fast_math", "--use-fast-math"},
      {"-Xptxas=-v", "program_options::ptxas_options", "--ptxas-options"},
      {"--dopt=on", "program_options::device_code_optimize", "--dopt"},
      {"-Ofc=max", "program_options::ofast_compile", "--Ofast-compile"},
      {"-default-device", "program_options::device_as_default_execution_space", "--default-device"},
      {"-w", "program_options::disable_warnings", "--disable-warnings"},
      {"-diag-suppress=177", "program_options::diag_suppress", "--diag-suppress"},
      {"--diag_suppress=177", "program_options::diag_suppress", "--diag-suppress"},
      {"-pch", "program_options::pch", "--pch"},
      {"--pch-dir=/tmp", "program_options::pch_dir", "--pch-dir"},
      {"--pch_dir=/tmp", "program_options::pch_dir", "--pch-dir"},
      {"-create-pch=a.pch", "program_options::create_pch", "--create-pch"},
      {"-use-pch=a.pch", "program_options::use_pch", "--use-pch"},
      {"-time=t.csv", "program_options::time", "--time"},
      {"--fdevice-time-trace=t.json", "program_options::fdevice_time_trace",
       "--fdevice-time-trace"},
      {"-no-cache", "program_options::no_cache", "--no-compiler-cache"},
      {"-split-compile=2", "program_options::split_compile", "--split-compile"},
      {"-enable-tile", "program_options::enable_tile", "--enable-tile"},
      {"--tile-only", "program_options::tile_only", "--tile-only"},
      {"-simt-only", "program_options::simt_only", "--simt-only"},
      {"-default-tile", "program_options::default_tile", "--default-tile"},
      {"--diagnose-implicit-tile-var", "program_options::diagnose_implicit_tile_var",
       "--diagnose-implicit-tile-var"},
      {"-Werror=reorder", "program_options::warning_as_error", "--warning-as-error"},
      {"--warning-as-error=all-warnings", "program_options::warning_as_error",
       "--warning-as-error"},
      {"-Wreorder", "program_options::wreorder", "--Wreorder"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.option);
    program_options o = with_arch();
    o.extra_nvrtc_options = {"-jtd=50", r.option};
    try {
      nvrtc(o);
      ADD_FAILURE() << "accepted";
    } catch (const invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.starts_with(std::string("extra_nvrtc_options[1] \"") + r.option + "\""))
          << what;
      EXPECT_NE(what.find(std::string("option for ") + r.field + ": set "), std::string::npos)
          << what;
      EXPECT_NE(what.find(std::string("command line: ") + r.cli), std::string::npos) << what;
    }
  }
}

TEST(ProgramOptions, MalformedExtraNvrtcOptionsAreRefused) {
  auto refused = [](std::vector<std::string> extra, const char* needle) {
    program_options o = with_arch();
    o.extra_nvrtc_options = std::move(extra);
    try {
      nvrtc(o);
      ADD_FAILURE() << "accepted; expected an error with " << needle;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused({""}, "extra_nvrtc_options[0] is empty");
  // NVRTC trims these and would read -include: the check must not be fooled by them.
  refused({" -include=x.h"}, "leading or trailing spaces");
  refused({"-jtd=50", "\n-include=x.h"}, "extra_nvrtc_options[1] \"\\x0a-include=x.h\"");
  refused({"-include=x.h\t"}, "control character");
  refused({std::string("-w\0x", 4)}, "control character");
  refused({"--optix-ir"}, "OptiX IR");
  // The element after -Xcudafe is the front end's; the one after "-Xcudafe=..." is NVRTC's again.
  refused({"-Xcudafe=--display_error_number", "-std=c++20"}, "program_options::std");
  program_options o = with_arch();
  o.extra_nvrtc_options = {"-Xcudafe", "--diag_suppress=177"};
  EXPECT_NO_THROW(nvrtc(o));
}

TEST(ProgramOptions, ExtraNvrtcOptionsAreCxxOnly) {
  program_options o = with_arch();
  o.extra_nvrtc_options = {"-jtd=50"};
  for (const auto source : {source_type::nvvm, source_type::ptx}) {
    try {
      compiler_flags(o, source, source == source_type::nvvm ? code_type::ptx : code_type::cubin);
      ADD_FAILURE() << "accepted for " << to_string(source);
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("extra_nvrtc_options"), std::string::npos) << e.what();
    }
  }
}

TEST(ProgramOptions, ArchForms) {
  for (const char* arch : {"sm_90", "sm_90a", "sm_100f", "compute_80", "sm_120"}) {
    program_options o;
    o.arch = arch;
    EXPECT_EQ(nvrtc(o).front(), std::string("-arch=") + arch);
  }
}

TEST(ProgramOptions, FlagsRequireAResolvedArch) {
  EXPECT_THROW(compiler_flags(program_options{}, source_type::cxx, code_type::ptx),
               invalid_argument);
}

TEST(NvvmOptions, SupportedFieldsAndOrder) {
  program_options o = with_arch();
  o.debug = true;
  o.device_code_optimize = false;
  o.ftz = true;
  o.prec_sqrt = false;
  o.prec_div = true;
  o.fma = false;
  EXPECT_EQ(compiler_flags(o, source_type::nvvm, code_type::ptx),
            (std::vector<std::string>{"-arch=compute_90", "-g", "-opt=0", "-ftz=1", "-prec-sqrt=0",
                                      "-prec-div=1", "-fma=0"}));
  auto lto = compiler_flags(with_arch(), source_type::nvvm, code_type::ltoir);
  EXPECT_EQ(lto, (std::vector<std::string>{"-arch=compute_90", "-gen-lto"}));
}

TEST(NvvmOptions, UnsupportedFieldsAreRefusedByName) {
  program_options o = with_arch();
  o.lineinfo = true;
  o.std = "c++17";
  o.include_path = {"/x"};
  try {
    compiler_flags(o, source_type::nvvm, code_type::ptx);
    FAIL() << "accepted";
  } catch (const invalid_argument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("lineinfo"), std::string::npos) << what;
    EXPECT_NE(what.find("std"), std::string::npos) << what;
    EXPECT_NE(what.find("include_path"), std::string::npos) << what;
    EXPECT_NE(what.find("NVVM"), std::string::npos) << what;
  }
  program_options empty_module = with_arch();
  empty_module.extra_sources = {{"empty", ""}};
  EXPECT_THROW(compiler_flags(empty_module, source_type::nvvm, code_type::ptx), invalid_argument);
}

TEST(PtxOptions, TranslatedToLinkerOptions) {
  program_options o = with_arch();
  o.name = "k.ptx";
  o.debug = true;
  o.lineinfo = true;
  o.max_register_count = 40;
  o.ftz = false;
  o.ptxas_options = {"-v"};
  o.time = "ignored-path";
  o.no_cache = true;
  linker_options l = to_linker_options(o);
  EXPECT_EQ(l.name, "k.ptx");
  EXPECT_EQ(l.arch, "sm_90");
  EXPECT_EQ(l.time, true);
  EXPECT_EQ(compiler_flags(o, source_type::ptx, code_type::cubin),
            (std::vector<std::string>{"-arch=sm_90", "-maxrregcount=40", "-time", "-g", "-lineinfo",
                                      "-ftz=false", "-Xptxas=-v", "-no-cache"}));
  program_options bad = with_arch();
  bad.std = "c++17";
  bad.define_macro = {"X"};
  try {
    to_linker_options(bad);
    FAIL() << "accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("define_macro, std"), std::string::npos) << e.what();
  }
}

TEST(LinkerOptions, NvJitLinkFlagsInOrder) {
  linker_options l;
  l.arch = "sm_90";
  l.max_register_count = 64;
  l.time = true;
  l.verbose = true;
  l.link_time_optimization = true;
  l.ptx = true;
  l.optimization_level = 3;
  l.debug = true;
  l.lineinfo = true;
  l.ftz = true;
  l.prec_div = false;
  l.prec_sqrt = true;
  l.fma = false;
  l.kernels_used = {"k1", "k2"};
  l.variables_used = {"v"};
  l.optimize_unused_variables = true;
  l.ptxas_options = {"-v"};
  l.split_compile = 2;
  l.split_compile_extended = 3;
  l.no_cache = true;
  EXPECT_EQ(nvjitlink_flags(l), (std::vector<std::string>{"-arch=sm_90",
                                                          "-maxrregcount=64",
                                                          "-time",
                                                          "-verbose",
                                                          "-lto",
                                                          "-ptx",
                                                          "-O3",
                                                          "-g",
                                                          "-lineinfo",
                                                          "-ftz=true",
                                                          "-prec-div=false",
                                                          "-prec-sqrt=true",
                                                          "-fma=false",
                                                          "-kernels-used=k1",
                                                          "-kernels-used=k2",
                                                          "-variables-used=v",
                                                          "-optimize-unused-variables",
                                                          "-Xptxas=-v",
                                                          "-split-compile=2",
                                                          "-split-compile-extended=3",
                                                          "-no-cache"}));
  l.optimization_level = 4;
  EXPECT_THROW(nvjitlink_flags(l), invalid_argument);
}

TEST(Targets, MatrixIsEnforced) {
  struct row {
    source_type source;
    code_type target;
    bool ok;
  };
  const row rows[] = {
      {source_type::cxx, code_type::ptx, true},       {source_type::cxx, code_type::cubin, true},
      {source_type::cxx, code_type::ltoir, true},     {source_type::cxx, code_type::fatbin, false},
      {source_type::cxx, code_type::object, false},   {source_type::cxx, code_type::library, false},
      {source_type::cxx, code_type::tile_ir, true},   {source_type::ptx, code_type::tile_ir, false},
      {source_type::nvvm, code_type::tile_ir, false}, {source_type::ptx, code_type::cubin, true},
      {source_type::ptx, code_type::ptx, false},      {source_type::ptx, code_type::ltoir, false},
      {source_type::ptx, code_type::fatbin, false},   {source_type::nvvm, code_type::ptx, true},
      {source_type::nvvm, code_type::ltoir, true},    {source_type::nvvm, code_type::cubin, false},
      {source_type::nvvm, code_type::fatbin, false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(std::string(to_string(r.source)) + " -> " + std::string(to_string(r.target)));
    if (r.ok) {
      EXPECT_NO_THROW(check_target(r.source, r.target));
    } else {
      try {
        check_target(r.source, r.target);
        ADD_FAILURE() << "accepted";
      } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("supported:"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(Names, ParseAndPrint) {
  EXPECT_EQ(parse_source_type("C++"), source_type::cxx);
  EXPECT_EQ(parse_source_type("ptx"), source_type::ptx);
  EXPECT_EQ(parse_source_type("NVVM"), source_type::nvvm);
  EXPECT_THROW(parse_source_type("fortran"), invalid_argument);
  for (auto t : {code_type::ptx, code_type::cubin, code_type::ltoir, code_type::fatbin,
                 code_type::object, code_type::library}) {
    EXPECT_EQ(parse_code_type(to_string(t)), t);
  }
  EXPECT_THROW(parse_code_type("elf"), invalid_argument);
  // Case-insensitive, like parse_source_type.
  EXPECT_EQ(parse_code_type("CUBIN"), code_type::cubin);
  EXPECT_EQ(parse_code_type("Ptx"), code_type::ptx);
  EXPECT_EQ(parse_code_type("LtoIR"), code_type::ltoir);
  // Tile IR: "tile_ir" as cucore prints it, "tile-ir" as the command line writes it.
  EXPECT_EQ(to_string(code_type::tile_ir), "tile_ir");
  EXPECT_EQ(parse_code_type("tile_ir"), code_type::tile_ir);
  EXPECT_EQ(parse_code_type("Tile-IR"), code_type::tile_ir);
}

// ---- an arch the compiler does not know -----------------------------------------------------

// NVRTC says only "invalid value for --gpu-architecture (-arch)": the error names the value and
// the architectures the loaded NVRTC compiles for (nvrtcGetSupportedArchs).
TEST(ProgramOptions, AnArchNvrtcDoesNotCompileForIsNamedWithTheSupportedOnes) {
  for (const char* arch : {"sm_9999", "compute_9999", "sm_12a"}) {
    SCOPED_TRACE(arch);
    program_options o;
    o.arch = arch;
    program p("extern \"C\" __global__ void k() {}", source_type::cxx, o);
    try {
      (void)p.compile(code_type::ptx);
      ADD_FAILURE() << "compiled";
    } catch (const invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("arch \"") + arch + "\""), std::string::npos) << m;
      EXPECT_NE(m.find("NVRTC"), std::string::npos) << m;
      EXPECT_NE(m.find("sm_90"), std::string::npos) << m;  // every NVRTC 12 and 13 has it
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an invalid_argument: " << e.what();
    }
  }
  // Another option NVRTC refuses is still its compile_error, with its log.
  program_options o = with_arch();
  o.extra_nvrtc_options = {"--no-such-option"};
  program p("extern \"C\" __global__ void k() {}", source_type::cxx, o);
  EXPECT_THROW((void)p.compile(code_type::ptx), compile_error);
}

}  // namespace
}  // namespace cucore
