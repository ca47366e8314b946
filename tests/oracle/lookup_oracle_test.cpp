// NVRTC's header lookup, rule by rule, with NVRTC itself as the judge: each case is compiled
// uncached under strace (oracle_support.hpp) and every file it read and every absent path it
// probed must be tracked by the key. And the stale hit that showed the .stdh rule was missing:
// an edited NAME.stdh is a miss, with the bytes of an uncached compile.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cucore/cache/file_stream.hpp"
#include "cucore/program.hpp"
#include "oracle_cases.hpp"
#include "test_support.hpp"

namespace cucore::oracle {
namespace {

namespace fs = std::filesystem;
using cucore::testing::temp_dir;
using cucore::testing::write_text;

const std::string kStoresFoo = "\nextern \"C\" __global__ void k(int* o) { *o = FOO; }\n";

TEST(LookupOracle, StdhFileIsReadAndTracked) {
  temp_dir t;
  put(t.path(), "D/foo.stdh", "#define FOO 1\n");
  put(t.path(), "E/foo", "#define FOO 3\n");  // later in the search: the .stdh above wins
  oracle_case c = case_in(t.path(), "#include <foo>" + kStoresFoo);
  c.include_path = {(t.path() / "D").string(), (t.path() / "E").string()};
  const file_accesses seen = trace_compile(c, t.path() / "scratch");
  ASSERT_EQ(seen.exit_status, 0) << seen.errors;
  EXPECT_EQ(seen.read.count((t.path() / "D/foo.stdh").string()), 1u);
  EXPECT_EQ(seen.read.count((t.path() / "E/foo").string()), 0u);
  const oracle_report r = compare(c, seen, tracked_by_key(c), {t.path().string()});
  EXPECT_TRUE(r.holds()) << r.describe();
}

// The reproduction: a directory cache, the .stdh edited between two compiles.
TEST(LookupOracle, EditedStdhIsAMissWithTheUncachedBytes) {
  temp_dir t;
  put(t.path(), "D/foo.stdh", "#define FOO 1\n");
  program_options o;
  o.arch = "sm_90";
  o.name = (t.path() / "k.cu").string();
  o.include_path = {(t.path() / "D").string()};
  file_stream_program_cache cache(t.path() / "cache");
  const std::string code = "#include <foo>" + kStoresFoo;
  const auto compile = [&](bool cached) {
    program p(code, source_type::cxx, o);
    object_code out = p.compile(code_type::ptx, {}, cached ? &cache : nullptr);
    return std::make_pair(out, p.last_cache_outcome());
  };
  auto [first, first_outcome] = compile(true);
  EXPECT_EQ(first_outcome, cache_outcome::miss);
  EXPECT_NE(first.text().find(", 1;"), std::string_view::npos);
  put(t.path(), "D/foo.stdh", "#define FOO 2\n");
  auto [second, second_outcome] = compile(true);
  EXPECT_EQ(second_outcome, cache_outcome::miss) << "an edited NAME.stdh must not hit";
  EXPECT_EQ(second.text(), compile(false).first.text());
  EXPECT_NE(second.text().find(", 2;"), std::string_view::npos);
  // And a .stdh added earlier in the search than the file that was found: a miss too.
  put(t.path(), "E/bar", "#define BAR 5\n");
  o.include_path.push_back((t.path() / "E").string());
  const std::string bar = "#include <bar>\nextern \"C\" __global__ void k(int* o) { *o = BAR; }\n";
  program p1(bar, source_type::cxx, o);
  (void)p1.compile(code_type::ptx, {}, &cache);
  put(t.path(), "D/bar.stdh", "#define BAR 6\n");
  program p2(bar, source_type::cxx, o);
  const object_code shadowed = p2.compile(code_type::ptx, {}, &cache);
  EXPECT_EQ(p2.last_cache_outcome(), cache_outcome::miss);
  EXPECT_NE(shadowed.text().find(", 6;"), std::string_view::npos);
}

TEST(LookupOracle, QuotedIncludesBesideTheIncluderThenTheSearchPath) {
  temp_dir t;
  put(t.path(), "prog/local.h", "#include \"sub/deeper\"\n#include \"../up.h\"\n#define FOO 1\n");
  put(t.path(), "prog/sub/deeper.stdh", "#include \"sibling\"\n");
  put(t.path(), "I/sibling", "\n");  // not beside deeper.stdh: found on the search path
  put(t.path(), "up.h", "\n");
  oracle_case c = case_in(t.path(), "#include \"local.h\"" + kStoresFoo);
  c.include_path = {(t.path() / "I").string()};
  expect_tracked(c, t.path());
}

TEST(LookupOracle, PreIncludeRelativeAndAbsolute) {
  temp_dir t;
  put(t.path(), "I/pre", "#define FOO 4\n");
  put(t.path(), "abs/other.h", "\n");
  oracle_case c = case_in(t.path(), "extern \"C\" __global__ void k(int* o) { *o = FOO; }\n");
  c.include_path = {(t.path() / "J").string(), (t.path() / "I").string()};
  c.pre_include = {"pre", (t.path() / "abs/other.h").string()};
  expect_tracked(c, t.path());
  // Found in the working directory as given.
  put(t.path(), "cwd/pre", "#define FOO 5\n");
  expect_tracked(c, t.path());
}

TEST(LookupOracle, IncludeNextContinuesFromWhereThisRouteFoundTheIncluder) {
  temp_dir t;
  // x.h is reached twice: beside the program (no search index: include_next starts at A) and
  // through -I A (include_next goes on at B).
  put(t.path(), "prog/x.h", "#include_next <x.h>\n");
  put(t.path(), "A/x.h", "#pragma once\n#include_next <x.h>\n");
  put(t.path(), "B/x.h", "#pragma once\n#define FOO 2\n");
  // Reached again as the third directory's nx, whose own next search finds nothing.
  put(t.path(), "A/nx", "#if __has_include_next(<nx>)\n#include_next <nx>\n#endif\n");
  oracle_case c =
      case_in(t.path(), "#include \"x.h\"\n#include <x.h>\n#include <nx>\n" + kStoresFoo);
  c.include_path = {(t.path() / "A").string(), (t.path() / "B").string(),
                    (t.path() / "A").string()};  // not de-duplicated: A again after B
  // Where NVRTC refuses __has_include_next in #if (13.5), nx fails to compile after the lookups
  // before it, which are checked all the same; the rest of the case is checked without nx.
  const bool has_next = nvrtc_has_include_next();
  expect_tracked(c, t.path(), /*compiles=*/has_next);
  if (!has_next) {
    c.code = "#include \"x.h\"\n#include <x.h>\n" + kStoresFoo;
    expect_tracked(c, t.path());
  }
}

TEST(LookupOracle, HasIncludeSeesStdhAndMacroNamedHeaders) {
  temp_dir t;
  put(t.path(), "I/opt.stdh", "#define FOO 7\n");
  put(t.path(), "I/cfg/impl.h", "#define IMPL 1\n");
  const std::string code =
      "#if __has_include(<opt>)\n#include <opt>\n#endif\n"
      "#define HEADER(x) <cfg/x>\n#include HEADER(impl.h)\n"
      "#define SPACED <cfg/impl.h >\n#include SPACED\n" +
      kStoresFoo;
  oracle_case c = case_in(t.path(), code);
  c.include_path = {(t.path() / "I").string()};
  expect_tracked(c, t.path());
}

TEST(LookupOracle, SymlinkedHeadersAndDirectories) {
  temp_dir t;
  put(t.path(), "real/inner/a.h", "#include \"b.h\"\n#define FOO 3\n");
  put(t.path(), "real/inner/b.h", "\n");
  fs::create_directories(t.path() / "I");
  fs::create_directory_symlink(t.path() / "real/inner", t.path() / "I/linked");
  put(t.path(), "other/c.h", "\n");
  fs::create_symlink(t.path() / "other/c.h", t.path() / "I/c.h");
  oracle_case c = case_in(t.path(), "#include <linked/a.h>\n#include <c.h>\n" + kStoresFoo);
  c.include_path = {(t.path() / "I").string()};
  expect_tracked(c, t.path());
}

// A directory or a symlink loop where a header could be: NVRTC opens the directory, reads
// nothing, and goes on (to NAME.stdh, then the next directory); so does the key, which records
// each as not a file, so that replacing one with a real header is a miss.
TEST(LookupOracle, DirectoriesAndSymlinkLoopsInAHeadersPlaceAreSkipped) {
  temp_dir t;
  fs::create_directories(t.path() / "A/foo");
  put(t.path(), "B/foo", "#define FOO 2\n");
  fs::create_symlink("loop", t.path() / "A/loop");
  put(t.path(), "B/loop", "#define LOOP 3\n");
  oracle_case c = case_in(t.path(),
                          "#include <foo>\n#include <loop>\n"
                          "extern \"C\" __global__ void k(int* o) { *o = FOO + LOOP; }\n");
  c.include_path = {(t.path() / "A").string(), (t.path() / "B").string()};
  const file_accesses seen = trace_compile(c, t.path() / "scratch");
  ASSERT_EQ(seen.exit_status, 0) << seen.errors;
  EXPECT_TRUE(compare(c, seen, tracked_by_key(c), {t.path().string()}).holds());

  program_options o = options_of(c);
  file_stream_program_cache cache(t.path() / "cache");
  const auto compile = [&](const char* expected) {
    program p(c.code, source_type::cxx, o);
    const object_code out = p.compile(code_type::ptx, {}, &cache);
    EXPECT_EQ(p.last_cache_outcome(), cache_outcome::miss);
    EXPECT_NE(out.text().find(expected), std::string_view::npos) << out.text();
  };
  compile(", 5;");
  fs::remove(t.path() / "A/foo");
  put(t.path(), "A/foo", "#define FOO 20\n");  // the directory is a header now
  compile(", 23;");
  fs::remove(t.path() / "A/loop");
  put(t.path(), "A/loop", "#define LOOP 30\n");  // and so is the loop
  compile(", 50;");
}

TEST(LookupOracle, GroupsNeverEnteredAreNotFollowed) {
  temp_dir t;
  put(t.path(), "I/used.h", "#define FOO 1\n#define SOMETIMES\n");
  put(t.path(), "I/never.h", "#error never read\n");
  put(t.path(), "I/maybe.h", "\n");
  const std::string code =
      "#include <used.h>\n"
      "#ifdef NOTHING_DEFINES_THIS\n#include <never.h>\n#endif\n"
      "#if defined(NOR_THIS) && !defined(FOO)\n#include <never.h>\n#endif\n"
      "#if 0\n#include <never.h>\n#elif defined(SOMETIMES)\n#include <maybe.h>\n#endif\n" +
      kStoresFoo;
  oracle_case c = case_in(t.path(), code);
  c.include_path = {(t.path() / "I").string()};
  const oracle_report r = expect_tracked(c, t.path());
  const tracked_paths tracked = tracked_by_key(c);
  EXPECT_EQ(tracked.files.count((t.path() / "I/never.h").string()), 0u);
  EXPECT_EQ(tracked.files.count((t.path() / "I/maybe.h").string()), 1u);
  EXPECT_EQ(tracked.skipped, 3u);
  // Defined on the command line: followed (and NVRTC fails on the #error it reads).
  c.defines = {{"NOTHING_DEFINES_THIS", std::nullopt}};
  const tracked_paths now = tracked_by_key(c);
  EXPECT_EQ(now.files.count((t.path() / "I/never.h").string()), 1u);
  expect_tracked(c, t.path(), /*compiles=*/false);  // NVRTC reads never.h: its #error
}

}  // namespace
}  // namespace cucore::oracle
