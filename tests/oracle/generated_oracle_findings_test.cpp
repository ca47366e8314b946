// What the generated oracle (generated_oracle_test.cpp) found, minimised by hand: regression tests
// (generated_oracle_support.hpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cucore/error.hpp"
#include "generated_oracle_support.hpp"
#include "oracle_cases.hpp"
#include "test_support.hpp"

namespace cucore::oracle {
namespace {

namespace fs = std::filesystem;

// ---- What the generated graphs found, minimised by hand: regression tests. Each failed when it
// was found (the key missed a file NVRTC reads or a path it probes, so an edit there was a stale
// hit; or the key was never derived), with seed 0x190dac1e5eed unless said otherwise.

// A finding's case: `code` plus a kernel, with -I root/I.
oracle_case finding_case(const fs::path& root, const std::string& code) {
  oracle_case c = case_in(root, code + "extern \"C\" __global__ void k(int* o) { *o = 1; }\n");
  c.include_path = {(root / "I").string()};
  fs::create_directories(root / "I");
  return c;
}

// A header NVRTC opens by its own path, not through a directory of the search (a pre-include
// found as spelled: an absolute path, or a relative one from the working directory; a header
// included by an absolute path), is a primary source file to it, like the program: a quoted
// #include_next or __has_include_next in it acts as #include / __has_include (EDG warns
// "#include_next cannot be used in the primary source file") and searches the header's own
// directory first, then every -I directory. The key gave such a header no search index and
// continued from the first -I directory without looking beside it. (Measured besides: a header
// found beside its includer continues from the first -I directory without looking beside itself,
// and one found through -I DIR after DIR, as the key has them; angle forms search -I from the
// start either way.)
// Found by cases 41 and 56 (pre-includes) and 502 (an absolute #include).
TEST(GeneratedOracleFinding, QuotedIncludeNextInAHeaderOpenedByItsPathActsAsInclude) {
  const case_dir t;
  put(t.path(), "P/pre.h", "#pragma once\n#include_next \"x.h\"\n");
  put(t.path(), "P/x.h", "#pragma once\n");  // NVRTC reads this one
  put(t.path(), "I/x.h", "#pragma once\n");  // the key tracked this one
  oracle_case c = finding_case(t.path(), "");
  c.pre_include = {(t.path() / "P/pre.h").string()};
  expect_tracked(c, t.path());
  // Relative, found in the working directory: NVRTC probes cwd/sub/y and cwd/sub/y.stdh.
  // (Where NVRTC refuses __has_include_next, 13.5, the compile fails there, after the probes.)
  put(t.path(), "cwd/sub/pre2.h", "#pragma once\n#if __has_include_next(\"y\")\n#endif\n");
  c.pre_include = {"sub/pre2.h"};
  expect_tracked(c, t.path(), /*compiles=*/nvrtc_has_include_next());
  // Included by an absolute path.
  put(t.path(), "Q/y.h", "#pragma once\n#include_next \"x.h\"\n");
  put(t.path(), "Q/x.h", "#pragma once\n");  // NVRTC reads this one
  expect_tracked(finding_case(t.path(), "#include \"" + (t.path() / "Q/y.h").string() + "\"\n"),
                 t.path());
}

// The same rule for the program itself (quoted #include_next searches the program's directory).
// The walk recognised the program by the address of its node, and two paths handed it a copy: a
// macro-named include (resolve_computed) and an include in a group first skipped, then entered
// once a header defined its macro (revisit_skipped); both then never looked beside the program.
// Found by cases 11 and 57 (the macro) and 78 (the group).
TEST(GeneratedOracleFinding, QuotedIncludeNextInTheProgramThroughAMacroOrARevisitedGroup) {
  const case_dir t;
  put(t.path(), "prog/a.h", "#pragma once\n");  // NVRTC reads it; the key tracked only I/a.h
  expect_tracked(finding_case(t.path(), "#define H \"a.h\"\n#include_next H\n"), t.path());
  put(t.path(), "I/d.h", "#pragma once\n#define DEF 1\n");
  expect_tracked(
      finding_case(t.path(), "#include <d.h>\n#ifdef DEF\n#include_next \"a.h\"\n#endif\n"),
      t.path());
}

// A macro-named include in a group that is skipped at first and entered once a header that
// defines the group's macro joins: revisit_skipped queued it for resolve_computed in the walk's
// last round, after resolve_computed had run, and the loop then stopped (no new node, defined
// names unchanged): the include was never resolved. NVRTC reads I/sub/d and probes prog/sub/d
// and prog/sub/d.stdh; the key tracked none of them.
// Found by the first runs of this test (an earlier generator: case 100 there).
TEST(GeneratedOracleFinding, MacroNamedIncludeInAGroupEnteredInTheLastRound) {
  const case_dir t;
  put(t.path(), "I/b.h", "#pragma once\n#define H \"sub/d\"\n");
  put(t.path(), "I/sub/d", "#pragma once\n");
  expect_tracked(finding_case(t.path(), "#include <b.h>\n#ifdef H\n#include H\n#endif\n"),
                 t.path());
}

// Two headers that include each other through "..": each pass round the cycle spells the same
// files with one more "sub/.." (prog/sub/../b, prog/sub/../sub/c.h, prog/sub/../sub/../b, ...),
// and the walk took every spelling for a new header to walk. With one include each way the
// chain only ended when the spelled path outgrew PATH_MAX (1,166 tracked spellings of 2 files);
// with two spellings of the include (here "sub/c.h" and "./sub/c.h") it doubled at each pass
// and the key was never derived (minutes of CPU, then gigabytes of memory: a run of 2000 cases
// that reached it was killed by the kernel at 24 GB). NVRTC reads the two files once each
// (#pragma once) and compiles in milliseconds. The key may refuse such a cycle (sound: nothing
// hits) or track it; it must be derived, and soon. In a child process with a limit here, so that
// a regression fails rather than hangs.
// Found by case 378 (macro-named includes with two definitions did the same), and by seed
// 0x5eed2 case 86.
TEST(GeneratedOracleFinding, HeadersIncludingEachOtherThroughDotDotEndTheWalk) {
  const case_dir t;
  put(t.path(), "prog/sub/c.h", "#pragma once\n#include \"../b\"\n");
  put(t.path(), "prog/b", "#pragma once\n#include \"sub/c.h\"\n#include \"./sub/c.h\"\n");
  const oracle_case c = finding_case(t.path(), "#include \"sub/c.h\"\n");
  warm_up_keys();
  const key_outcome key = key_in_child(c, kKeyLimitSeconds);
  ASSERT_TRUE(key.what == key_outcome::kind::tracked || key.what == key_outcome::kind::refused)
      << key.error;
  if (key.what == key_outcome::kind::refused) return;
  const file_accesses seen = trace_compile(c, t.path() / "scratch");
  EXPECT_EQ(seen.exit_status, 0) << seen.errors;
  const oracle_report r = compare(c, seen, key.tracked, {t.path().string()});
  EXPECT_TRUE(r.holds()) << r.describe();
}

// With no_source_include, NVRTC looks a relative pre-include up as spelled (from the working
// directory: NAME only) and then in the -I directories: the working directory's NAME.stdh is not
// tried (with source includes on, it is: cwd/NAME, cwd/NAME.stdh, then -I). The key tried
// cwd/NAME.stdh either way, so here it tracked cwd/q.stdh, which NVRTC never opens, and not
// I/q.stdh, which NVRTC reads.
// Found by case 922 (with the findings above fixed in a local copy).
TEST(GeneratedOracleFinding, RelativePreIncludeWithNoSourceIncludeSkipsTheWorkingDirectory) {
  const case_dir t;
  put(t.path(), "cwd/q.stdh", "#pragma once\n");
  put(t.path(), "I/q.stdh", "#pragma once\n");
  oracle_case c = finding_case(t.path(), "");
  c.pre_include = {"q"};
  c.no_source_include = true;
  expect_tracked(c, t.path());
}

// The oracle's own reading of the trace (oracle_support.cpp, parse_trace) took a call to end in
// ") = ", but strace pads a short call with blanks up to its result column:
//   openat(AT_FDCWD, "b", O_RDONLY)   = 4
// Every call shorter than that column (an open or a failed stat of a short relative path: a
// relative pre-include, a header under a relative -I such as ../I0) was dropped, so NVRTC's
// accesses through such paths were never compared with the key. Here NVRTC opens the pre-include
// "b" as spelled, from the working directory.
TEST(GeneratedOracleFinding, TheTraceKeepsShortCallsStracePadsToItsColumn) {
  const case_dir t;
  put(t.path(), "cwd/b", "#pragma once\n");
  oracle_case c = finding_case(t.path(), "");
  c.pre_include = {"b"};
  const file_accesses seen = trace_compile(c, t.path() / "scratch");
  EXPECT_EQ(seen.exit_status, 0) << seen.errors;
  EXPECT_EQ(seen.read.count((t.path() / "cwd/b").string()), 1u);
}

}  // namespace
}  // namespace cucore::oracle
