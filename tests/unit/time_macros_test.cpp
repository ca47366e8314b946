// The clock, soundly (issue 39): a program that uses __TIME__, __DATE__ or __TIMESTAMP__, or may
// form one by pasting (##) from tokens anywhere in its unit (files, in-memory headers, option
// values, NVRTC_APPEND_FLAGS), bypasses the cache with cache_skip_reason::time_macros.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "cucore/cache/key.hpp"
#include "cucore/cache/statistics.hpp"
#include "key/include_scanner.hpp"
#include "key/time_macros.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using cucore::testing::scoped_env;
using cucore::testing::temp_dir;

class fixed_probes final : public compiler_probes {
 public:
  version_probe nvrtc() const override { return {true, "13.0"}; }
  version_probe nvvm() const override { return {true, "lib=2.0;ir=2.0.3.2"}; }
  linker_probe linker() const override { return {true, linker_backend::nvjitlink, "13.0", ""}; }
};

program_cache_key_inputs cxx(std::string_view code) {
  program_cache_key_inputs in;
  in.code = code;
  in.code_type = source_type::cxx;
  in.target = code_type::cubin;
  in.options.arch = "sm_90";
  return in;
}

bool time_bypass(const program_cache_key_inputs& in) {
  const program_cache_key k = make_program_cache_key(in, fixed_probes{});
  return k.bypass().has_value() && k.bypass()->reason == cache_skip_reason::time_macros;
}

// Unsets an environment variable for the test's scope (and restores it).
constexpr std::string_view kPlain = "extern \"C\" __global__ void k(int* a) { *a = 1; }\n";

TEST(TimeTokens, PiecesArePresentIdentifiersOnly) {
  const auto t = detail::scan_time_tokens("int __TI; // ME__\n/* DATE */ int x = ME__1;");
  EXPECT_FALSE(t.literal);
  EXPECT_FALSE(t.paste);
  std::vector<std::string> found;
  for (std::size_t i = 0; i < detail::time_macro_piece_count(); ++i) {
    if ((t.pieces[i / 64] >> (i % 64)) & 1) found.emplace_back(detail::time_macro_piece(i));
  }
  EXPECT_EQ(found, std::vector<std::string>{"__TI"});
  EXPECT_LE(detail::time_macro_piece_count(), 128u);
}

TEST(TimeTokens, PasteInEverySpelling) {
  for (const char* text : {"a##b", "a %:%: b", "a ?\?=?\?= b", "#define X(a) a#%:b"}) {
    EXPECT_TRUE(detail::scan_time_tokens(text).paste) << text;
  }
  EXPECT_FALSE(detail::scan_time_tokens("# define X #a").paste);
}

TEST(TimeTokens, UniversalCharacterNamesAndSplicesSpellTheName) {
  for (const char* text : {"const char* t = __\\u0054IME__;", "x = __\\U00000044ATE__;",
                           "x = __\\N{LATIN CAPITAL LETTER T}IME__;", "x = _\\N{LOW LINE}TIME__;",
                           "x = __TI\\\nME__;", "x = __TI\\  \nME__;", "x = __TI?\?/\nME__;"}) {
    EXPECT_TRUE(detail::may_use_time_macros(detail::scan_time_tokens(text))) << text;
  }
}

TEST(TimeTokens, CommentsHideNoCodeAfterStringsAndRawStrings) {
  // The // inside the literals is no comment: ME__ is a token.
  for (const char* text : {"#define C(a,b) a##b\nconst char* u = \"http://x\"; C(__TI, ME__)",
                           "#define C(a,b) a##b\nauto r = R\"d(\")d\" C(__TI,ME__) // x",
                           "#define C(a,b) a##b\nchar q = '\"'; C(__TI,ME__)",
                           "#define C(a,b) a##b\nint n = 1'000; C(__TI,ME__)"}) {
    EXPECT_TRUE(detail::may_use_time_macros(detail::scan_time_tokens(text))) << text;
  }
}

TEST(TimeMacrosKey, PlainProgramsAndPastesOfOtherNamesAreCached) {
  EXPECT_FALSE(time_bypass(cxx(kPlain)));
  EXPECT_FALSE(time_bypass(cxx("#define CAT(a,b) a##b\nint CAT(x, y);\n" + std::string(kPlain))));
  // The pieces without a paste operator form nothing.
  EXPECT_FALSE(time_bypass(cxx("int __TI, ME__;\n" + std::string(kPlain))));
}

TEST(TimeMacrosKey, LiteralUseBypassesAndSloppinessOptsOut) {
  const std::string code = "__device__ const char* t = __TIME__;\n" + std::string(kPlain);
  {
    scoped_env env("CUCORE_SLOPPINESS", nullptr);
    EXPECT_TRUE(time_bypass(cxx(code)));
  }
  scoped_env env("CUCORE_SLOPPINESS", "time_macros");
  EXPECT_FALSE(time_bypass(cxx(code)));
  EXPECT_FALSE(time_bypass(cxx("#define CAT(a,b) a##b\nconst char* t = CAT(__TI,ME__);")));
}

TEST(TimeMacrosKey, TokenPastingFormsTheNames) {
  scoped_env env("CUCORE_SLOPPINESS", nullptr);
  for (const char* code : {
           "#define CAT(a,b) a##b\n__device__ const char* t = CAT(__TI,ME__);\n",
           "#define CAT(a,b) a##b\n__device__ const char* t = CAT(__DA,TE__);\n",
           "#define T(x) __##x##__\n__device__ const char* t = T(TIME);\n",
           "#define T(x) __##x##__\n__device__ const char* t = T(TIMESTAMP);\n",
           "#define CAT4(a,b,c,d) a##b##c##d\nconst char* t = CAT4(__,TI,ME,__);\n",
           "#define CAT(a,b) a %:%: b\nconst char* t = CAT(__TI,ME__);\n",
       }) {
    EXPECT_TRUE(time_bypass(cxx(code))) << code;
  }
}

TEST(TimeMacrosKey, PastingMacroInOneHeaderUsedInAnother) {
  scoped_env env("CUCORE_SLOPPINESS", nullptr);
  // In memory.
  auto in = cxx("#include \"cat.h\"\n#include \"use.h\"\n");
  in.options.headers = {{"cat.h", "#define CAT(a,b) a##b\n"},
                        {"use.h", "__device__ const char* t = CAT(__TI,ME__);\n"}};
  EXPECT_TRUE(time_bypass(in));
  // On disk, through include_path, and a pre-include.
  const temp_dir dir;
  fs::create_directories(dir.path() / "inc");
  std::ofstream(dir.path() / "inc" / "cat.h") << "#define CAT(a,b) a##b\n";
  std::ofstream(dir.path() / "inc" / "use.h") << "const char* t = CAT(__DA,TE__);\n";
  auto files = cxx("#include <cat.h>\n#include <use.h>\n");
  files.options.include_path = {(dir.path() / "inc").string()};
  EXPECT_TRUE(time_bypass(files));
  std::ofstream(dir.path() / "inc" / "pre.h") << "const char* p = __TIMESTAMP__;\n";
  auto pre = cxx(kPlain);
  pre.options.pre_include = {(dir.path() / "inc" / "pre.h").string()};
  EXPECT_TRUE(time_bypass(pre));
}

TEST(TimeMacrosKey, OptionValuesUseOrFormTheNames) {
  scoped_env env("CUCORE_SLOPPINESS", nullptr);
  const std::string uses = "const char* t = STAMP;\n" + std::string(kPlain);
  auto define = cxx(uses);
  define.options.define_macro = {{"STAMP", "__TIME__"}};
  EXPECT_TRUE(time_bypass(define));
  auto paste = cxx("const char* t = T(DATE);\n");
  paste.options.define_macro = {{"T(x)", "__##x##__"}};
  EXPECT_TRUE(time_bypass(paste));
  auto pieces = cxx("#define CAT(a,b) a##b\nconst char* t = CAT(STAMP, ME__);\n");
  pieces.options.define_macro = {{"STAMP", "__TI"}};  // the piece __TI in a value
  EXPECT_TRUE(time_bypass(pieces));
  // extra_nvrtc_options refuses -D (define_macro is its one spelling); what it passes is scanned.
  for (const std::vector<std::string>& extra :
       std::vector<std::vector<std::string>>{{"--pre-include=__TIME__.h"}, {"-DSTAMP=__TIME__"}}) {
    auto e = cxx(uses);
    e.options.extra_nvrtc_options = extra;
    try {
      EXPECT_TRUE(time_bypass(e)) << extra.front();
    } catch (const std::exception& refused) {
      SUCCEED() << refused.what();
    }
  }
  auto plain = cxx(uses);
  plain.options.define_macro = {{"STAMP", "\"x\""}};
  EXPECT_FALSE(time_bypass(plain));
}

// NVRTC reads NVRTC_APPEND_FLAGS when it loads (a change later is a compiler_environment
// bypass): the check runs in a child process that starts with the variable set.
TEST(TimeMacrosKey, NvrtcAppendFlagsCarryTheNames) {
  const char* child = std::getenv("CUCORE_TIME_MACROS_CHILD");
  if (child != nullptr) {
    const std::string uses = "const char* t = STAMP;\n" + std::string(kPlain);
    const program_cache_key k = make_program_cache_key(cxx(uses), fixed_probes{});
    const bool time = k.bypass() && k.bypass()->reason == cache_skip_reason::time_macros;
    EXPECT_EQ(time, std::string(child) == "expect_bypass") << (k.bypass() ? k.bypass()->why : "");
    return;
  }
  for (const auto& [value, expect] :
       {std::pair{"-DSTAMP=__TIME__", "expect_bypass"}, std::pair{"-DSTAMP=0", "expect_cached"},
        std::pair{"-DCAT(a,b)=a##b -DSTAMP=CAT(__TI,ME__)", "expect_bypass"}}) {
    const std::string command = "env -u CUCORE_SLOPPINESS NVRTC_APPEND_FLAGS='" +
                                std::string(value) + "' CUCORE_TIME_MACROS_CHILD=" + expect +
                                " /proc/" + std::to_string(::getpid()) +
                                "/exe --gtest_filter=TimeMacrosKey.NvrtcAppendFlagsCarryTheNames"
                                " >/dev/null 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << value;
  }
}

}  // namespace
}  // namespace cucore
