// The #if evaluator and the conditional structure against NVRTC itself. The key's walk skips an
// #include in a group it proves is never entered (conditional_scan.hpp); when it is wrong, a
// header NVRTC reads is left out of the key and an edit of it is a stale hit.
//
// IfEvalRegression: each reproduction that was stale (issue 31), at the key level: NVRTC reads
// the header in the group (its marker is in the PTX), the key tracks it, and editing it changes
// the key.
//
// IfEvalDifferential: random #if expressions (every operator, signed and unsigned literals and
// suffixes, hex/octal/binary, character literals, defined, __has_include, true/false, macros
// defined, undefined and defined to expressions) in random directive sequences (nested chains,
// #elif, #else, #ifdef, #ifndef, #elifdef, #elifndef, lexing hazards in group bodies), one header
// per case, hundreds of cases in one compile per --std NVRTC accepts. Each group's body includes
// a header of its own that defines a marker variable: NVRTC entered the group iff the marker is in
// the PTX; the walk followed it iff the key tracks the header. Wherever NVRTC entered a group, the
// key must track its header. A case NVRTC rejects (division by zero in an evaluated #if, a hazard
// in an entered group, ...) is dropped and the batch compiled again without it.
//   CUCORE_IFEVAL_SEED   the seed (decimal or 0x...; default kDefaultSeed)
//   CUCORE_IFEVAL_CASES  cases per --std (default kDefaultCases)
//   CUCORE_IFEVAL_SECONDS  stop starting batches after this long (default 0: no limit)
//   CUCORE_IFEVAL_VERBOSE  set: print NVRTC's log of each batch it rejects
// A mismatch prints the case's header text and --std: add it to IfEvalRegression.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "oracle_cases.hpp"
#include "random_source.hpp"
#include "test_support.hpp"

namespace cucore::oracle {
namespace {

namespace fs = std::filesystem;
using cucore::testing::temp_dir;

constexpr std::uint64_t kDefaultSeed = 0x2026'1201'1f00ULL;
// Per --std: ~2 s in all. The walk is instrumented in sanitizer builds (NVRTC is not): fewer.
constexpr std::uint64_t kDefaultCases = default_cases(150, 60);
constexpr int kMaxReportedFailures = 5;
const std::vector<std::string> kStandards = {"c++03", "c++11", "c++14", "c++17", "c++20"};

// The basenames of the header files the key of `c` tracks.
std::set<std::string> tracked_names(const oracle_case& c) {
  std::set<std::string> out;
  for (const auto& path : tracked_by_key(c).files) out.insert(fs::path(path).filename().string());
  return out;
}

// Every marker variable (m<case>_<group>, or m_h) in the PTX: each identifier "m", digits, '_',
// then letters or digits (a plain scan: std::regex over a large PTX is slow under sanitizers).
std::set<std::string> markers(std::string_view ptx) {
  std::set<std::string> out;
  const auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  for (std::size_t i = ptx.find('m'); i != std::string_view::npos; i = ptx.find('m', i + 1)) {
    if (i > 0 && (word(ptx[i - 1]) || ptx[i - 1] == '$' || ptx[i - 1] == '.')) continue;
    std::size_t j = i + 1;
    while (j < ptx.size() && ptx[j] >= '0' && ptx[j] <= '9') ++j;
    if (j >= ptx.size() || ptx[j] != '_') continue;
    std::size_t k = j + 1;
    while (k < ptx.size() && word(ptx[k]) && ptx[k] != '_') ++k;
    if (k == j + 1 || (k < ptx.size() && (word(ptx[k]) || ptx[k] == '$'))) continue;
    out.emplace(ptx.substr(i, k - i));
  }
  return out;
}

oracle_case probe_case(const fs::path& root, const std::string& code, const std::string& std) {
  oracle_case c = case_in(root, code + "\nextern \"C\" __global__ void k() {}\n");
  c.std = std;
  return c;
}

// ---- The reproductions, one by one.

struct regression {
  const char* what;
  std::string code;  // includes "h.h" in the group that was wrongly pruned
  std::vector<std::string> standards;
};

std::vector<regression> regressions() {
  const std::vector<std::string> all = kStandards;
  // The arithmetic does not depend on --std (measured on every one): the oldest and a recent.
  const std::vector<std::string> arithmetic = {"c++03", "c++17"};
  const std::vector<std::string> cxx11_on = {"c++11", "c++14", "c++17", "c++20"};
  return {
      {"-1 > 0u", "#if -1 > 0u\n#include \"h.h\"\n#endif\n", arithmetic},
      {"~0u > 0", "#if ~0u > 0\n#include \"h.h\"\n#endif\n", arithmetic},
      {"(0u-1) > 0", "#if (0u-1) > 0\n#include \"h.h\"\n#endif\n", arithmetic},
      {"(1 ? -1 : 0u) > 0", "#if (1 ? -1 : 0u) > 0\n#include \"h.h\"\n#endif\n", arithmetic},
      {"#elif -2/2u > 0", "#if 0\n#elif -2/2u > 0\n#include \"h.h\"\n#endif\n", arithmetic},
      {"#if -1 < 0u ... #else", "#if -1 < 0u\n#else\n#include \"h.h\"\n#endif\n", arithmetic},
      {"0xffffffffffffffff > 0",
       "#if 0xffffffffffffffff > 0 && -1 < 0x8000000000000000\n#else\n#include \"h.h\"\n#endif\n",
       arithmetic},
      {"-1 > 0x80000000 (unsigned int)", "#if -1 > 0x80000000\n#include \"h.h\"\n#endif\n",
       arithmetic},
      {"-9223372036854775807 >= 0xffffffff (found by the differential test, seed 0x78)",
       "#if 0\n#elif -9223372036854775807 >= (0xffffffff)\n#include \"h.h\"\n#endif\n", arithmetic},
      {"#define true 0", "#define true 0\n#if !true\n#include \"h.h\"\n#endif\n", arithmetic},
      {"#define false 1", "#define false 1\n#if false\n#include \"h.h\"\n#endif\n", arithmetic},
      {"#elifndef NOPE then #else", "#if 0\n#elifndef NOPE\n#else\n#include \"h.h\"\n#endif\n",
       all},
      {"#elifdef NOPE then #else", "#if 0\n#elifdef NOPE\n#else\n#include \"h.h\"\n#endif\n", all},
      {"$R\"( in #if 0", "#if 0\n$R\"(\n#else\n)\"\n#else\n#include \"h.h\"\n#endif\n", cxx11_on},
      {"\\xc3\\xa9R\"( in #if 0",
       "#if 0\n\xc3\xa9R\"(\n#else\n)\"\n#else\n#include \"h.h\"\n#endif\n", cxx11_on},
      {"1'0'/* in #if 0", "#if 0\n1'0'/*\n#else\n*/\n#else\n#include \"h.h\"\n#endif\n", all},
      {"R\"( under c++03",
       "#if 1\n#else\nR\"(\n#endif\n#include \"h.h\"\n#if 0\n)\"\n#endif\n",
       {"c++03"}},
  };
}

TEST(IfEvalRegression, HeaderInTheGroupIsReadByNvrtcAndTracked) {
  for (const regression& r : regressions()) {
    for (const std::string& std : r.standards) {
      SCOPED_TRACE(std::string(r.what) + " under --std " + std);
      temp_dir t;
      put(t.path(), "prog/h.h", "__device__ int m_h = 1;\n");
      const oracle_case c = probe_case(t.path(), r.code, std);
      // NVRTC reads h.h: its marker is in the PTX.
      program p(c.code, source_type::cxx, options_of(c));
      const object_code ptx = p.compile(code_type::ptx);
      ASSERT_EQ(markers(ptx.text()).count("m_h"), 1u) << "NVRTC does not enter the group";
      // The key tracks it, and an edit of it changes the key.
      EXPECT_EQ(tracked_names(c).count("h.h"), 1u) << r.code;
      program_cache_key_inputs inputs;
      inputs.code = c.code;
      inputs.options = options_of(c);
      inputs.target = code_type::ptx;
      const fs::path cwd = fs::current_path();
      fs::current_path(c.cwd);
      const program_cache_key before = make_program_cache_key(inputs);
      put(t.path(), "prog/h.h", "__device__ int m_h = 2;\n");
      const program_cache_key after = make_program_cache_key(inputs);
      fs::current_path(cwd);
      EXPECT_NE(before, after) << "editing h.h does not change the key: " << r.code;
    }
  }
}

// The structure's own cases that must still be pruned (the fix keeps the walk useful).
TEST(IfEvalRegression, GroupsNeverEnteredAreStillSkipped) {
  temp_dir t;
  put(t.path(), "prog/never.h", "#error never read\n");
  const std::string code =
      "#if -1 > 0\n#include \"never.h\"\n#endif\n"
      "#if 0u - 1 < 0\n#include \"never.h\"\n#endif\n"
      "#if true && !false\n#else\n#include \"never.h\"\n#endif\n"
      "#if (0 ? 1u : -1) < 0\n#include \"never.h\"\n#endif\n";
  for (const std::string& std : kStandards) {
    SCOPED_TRACE(std);
    const oracle_case c = probe_case(t.path(), code, std);
    const tracked_paths tracked = tracked_by_key(c);
    EXPECT_EQ(tracked.files.size(), 0u);
    EXPECT_EQ(tracked.skipped, 4u);
    program p(c.code, source_type::cxx, options_of(c));
    EXPECT_NO_THROW(p.compile(code_type::ptx));
  }
}

// ---- The differential test.

// One case: a header of directives whose groups each include a header of their own.
class case_generator {
 public:
  case_generator(random_source& r, std::size_t index, bool redefine_booleans)
      : r_(r), k_(std::to_string(index)), redefine_booleans_(redefine_booleans) {}

  std::string text() {
    std::string out;
    // Macros: defined to expressions, empty, defined then undefined.
    for (int i = 0, n = static_cast<int>(r_.below(3)); i < n; ++i) {
      const std::string name = "D" + k_ + "_" + std::to_string(i);
      macros_.push_back(name);
      out += "#define " + name + (r_.chance(30) ? "" : " " + expression(1)) + "\n";
      if (r_.chance(25)) out += "#undef " + name + "\n";
    }
    if (redefine_booleans_ && r_.chance(30)) {
      out += r_.chance(50) ? "#define true 0\n" : "#define false 1\n";
      undef_booleans_ = true;
    }
    out += chain(0);
    if (r_.chance(30)) out += chain(0);
    if (undef_booleans_) out += "#undef true\n#undef false\n";
    return out;
  }
  const std::vector<std::string>& groups() const { return groups_; }

 private:
  std::string name() {
    switch (r_.below(5)) {
      case 0:
        if (!macros_.empty()) return r_.pick(macros_);
        [[fallthrough]];
      case 1:
        return "U" + k_ + "_" + std::to_string(r_.below(3));  // never defined
      case 2:
        return r_.pick(
            std::vector<std::string>{"true", "false", "__CUDACC_RTC__", "__cplusplus", "NULL"});
      default:
        return "U" + k_ + "_x";
    }
  }

  std::string literal() {
    static const std::vector<std::string> kLiterals = {"0",
                                                       "1",
                                                       "2",
                                                       "3",
                                                       "0u",
                                                       "1u",
                                                       "2U",
                                                       "0x10",
                                                       "010",
                                                       "0b101",
                                                       "1l",
                                                       "1LL",
                                                       "1ull",
                                                       "1lu",
                                                       "1uLL",
                                                       "4294967295",
                                                       "4294967295u",
                                                       "0xffffffff",
                                                       "0x7fffffffffffffff",
                                                       "0x8000000000000000",
                                                       "0xffffffffffffffff",
                                                       "9223372036854775807",
                                                       "18446744073709551615u",
                                                       "01777777777777777777777",
                                                       "'a'",
                                                       "'\\0'",
                                                       "'\\377'",
                                                       "'\\xff'",
                                                       "L'a'",
                                                       "U'a'",
                                                       "u'a'",
                                                       "1'0",
                                                       "0x1'0"};
    return r_.pick(kLiterals);
  }

  std::string expression(int depth) {
    const std::size_t choice = r_.below(depth >= 3 ? 3 : 10);
    switch (choice) {
      case 0:
      case 1:
        return literal();
      case 2: {
        const std::string n = name();
        return r_.chance(30) ? "defined " + n : r_.chance(40) ? "defined(" + n + ")" : n;
      }
      case 3: {
        static const std::vector<std::string> kUnary = {"-", "~", "!", "+", "- -", "!!"};
        return r_.pick(kUnary) + expression(depth + 1);
      }
      case 4:
      case 5:
      case 6: {
        static const std::vector<std::string> kBinary = {"*", "/", "%",  "+",  "-",  "<<", ">>",
                                                         "<", ">", "<=", ">=", "==", "!=", "&",
                                                         "^", "|", "&&", "||", "-",  "<",  ">"};
        const std::string op = r_.pick(kBinary);
        std::string right = expression(depth + 1);
        // Mostly not zero: a division by zero NVRTC evaluates is an error (the case is dropped).
        if ((op == "/" || op == "%") && r_.chance(80)) right = "(" + right + " | 1)";
        if ((op == "<<" || op == ">>") && r_.chance(70)) right = "(" + right + " & 31)";
        return expression(depth + 1) + " " + op + " " + right;
      }
      case 7:
        return "(" + expression(depth + 1) + " ? " + expression(depth + 1) + " : " +
               expression(depth + 1) + ")";
      case 8:
        if (r_.chance(20)) {
          return r_.chance(50) ? "__has_include(\"g" + k_ + "_0.h\")"
                               : "__has_include(<nope" + k_ + ".h>)";
        }
        if (r_.chance(5)) return "(" + expression(depth + 1) + ", " + expression(depth + 1) + ")";
        [[fallthrough]];
      default:
        return "(" + expression(depth + 1) + ")";
    }
  }

  // Lines that lex differently under different readings (raw strings, separators, splices).
  std::string hazard() {
    static const std::vector<std::string> kHazards = {"$R\"(\n#else\n)\"\n",
                                                      "\xc3\xa9R\"(\n#endif\n)\"\n",
                                                      "1'0'/*\n#else\n*/\n",
                                                      "R\"x(\n#endif\n)x\"\n",
                                                      "R\"(\n#elif 1\n)\"\n",
                                                      "1'0 + '/*';\n#else\n*/\n",
                                                      "// a comment \\\n#else\n",
                                                      "/*\n#endif\n*/\n",
                                                      "'\"'\n",
                                                      "\"/*\"\n#else\n",
                                                      "u8R\"(\n#else\n)\"\n"};
    return r_.pick(kHazards);
  }

  std::string body(int depth) {
    const std::string g = "g" + k_ + "_" + std::to_string(groups_.size());
    groups_.push_back(g);
    std::string out = "#include \"" + g + ".h\"\n";
    if (r_.chance(5)) out += hazard();
    if (depth < 2 && r_.chance(35)) out += chain(depth + 1);
    return out;
  }

  std::string chain(int depth) {
    std::string out;
    switch (r_.below(6)) {
      case 0:
        out += "#ifdef " + name() + "\n";
        break;
      case 1:
        out += "#ifndef " + name() + "\n";
        break;
      default:
        out += "#if " + expression(0) + "\n";
    }
    out += body(depth);
    for (int i = 0, n = static_cast<int>(r_.below(3)); i < n; ++i) {
      if (r_.chance(5)) {
        out += std::string(r_.chance(50) ? "#elifdef " : "#elifndef ") + name() + "\n";
      } else {
        out += "#elif " + expression(0) + "\n";
      }
      out += body(depth);
    }
    if (r_.chance(50)) {
      out += "#else\n";
      out += body(depth);
    }
    return out + "#endif\n";
  }

  random_source& r_;
  std::string k_;
  bool redefine_booleans_;
  bool undef_booleans_ = false;
  std::vector<std::string> macros_;
  std::vector<std::string> groups_;
};

struct generated {
  std::string text;
  std::vector<std::string> groups;
};

// Which cases NVRTC rejected, from its log ("…/c12.h(3): error: …"); empty if none named.
std::set<std::size_t> rejected_cases(const std::string& log) {
  std::set<std::size_t> out;
  static const std::regex error(R"(/c([0-9]+)\.h\([0-9]+\): (catastrophic )?error)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), error); it != std::sregex_iterator();
       ++it) {
    out.insert(static_cast<std::size_t>(std::stoul((*it)[1].str())));
  }
  return out;
}

struct batch_result {
  std::size_t cases = 0, dropped = 0, groups = 0, entered = 0, skipped_by_walk = 0;
  int failures = 0;
};

batch_result run_batch(std::uint64_t seed, std::size_t batch, std::size_t count,
                       const std::string& std) {
  batch_result result;
  temp_dir t;
  std::map<std::size_t, generated> cases;
  const bool redefine_booleans = batch % 2 == 1;
  for (std::size_t i = 0; i < count; ++i) {
    random_source r(seed, batch * 1'000'000 + i);
    case_generator gen(r, i, redefine_booleans);
    generated g{gen.text(), gen.groups()};
    put(t.path(), "prog/c" + std::to_string(i) + ".h", g.text);
    for (std::size_t j = 0; j < g.groups.size(); ++j) {
      put(t.path(), "prog/" + g.groups[j] + ".h",
          "__device__ int m" + std::to_string(i) + "_" + std::to_string(j) + " = 1;\n");
    }
    cases.emplace(i, std::move(g));
  }
  const auto program_text = [&cases] {
    std::string code;
    for (const auto& [i, g] : cases) code += "#include \"c" + std::to_string(i) + ".h\"\n";
    return code;
  };
  // Compiled again without the cases NVRTC rejects until it accepts them all.
  std::set<std::string> entered;
  for (int attempt = 0;; ++attempt) {
    const oracle_case c = probe_case(t.path(), program_text(), std);
    try {
      program p(c.code, source_type::cxx, options_of(c));
      entered = markers(p.compile(code_type::ptx).text());
      break;
    } catch (const compile_error& e) {
      const std::set<std::size_t> rejected = rejected_cases(e.log());
      if (rejected.empty() || attempt == 8) {
        ADD_FAILURE() << "NVRTC rejected the batch, naming no case: " << e.log().substr(0, 4000);
        ++result.failures;
        return result;
      }
      if (std::getenv("CUCORE_IFEVAL_VERBOSE") != nullptr) std::printf("%s\n", e.log().c_str());
      for (const std::size_t i : rejected) result.dropped += cases.erase(i);
    }
  }
  const oracle_case c = probe_case(t.path(), program_text(), std);
  const std::set<std::string> tracked = tracked_names(c);
  for (const auto& [i, g] : cases) {
    ++result.cases;
    for (std::size_t j = 0; j < g.groups.size(); ++j) {
      ++result.groups;
      const bool nvrtc_entered =
          entered.count("m" + std::to_string(i) + "_" + std::to_string(j)) != 0;
      const bool followed = tracked.count(g.groups[j] + ".h") != 0;
      result.entered += nvrtc_entered ? 1 : 0;
      result.skipped_by_walk += followed ? 0 : 1;
      if (nvrtc_entered && !followed && result.failures < kMaxReportedFailures) {
        ++result.failures;
        ADD_FAILURE() << "the walk skips a group NVRTC enters (--std " << std << ", seed 0x"
                      << std::hex << seed << std::dec << ", batch " << batch << ", case " << i
                      << ", group " << j << " (" << g.groups[j] << ".h)):\n"
                      << g.text;
      }
    }
  }
  return result;
}

TEST(IfEvalDifferential, WalkSkipsOnlyGroupsNvrtcNeverEnters) {
  const std::uint64_t seed = env_number("CUCORE_IFEVAL_SEED", kDefaultSeed);
  const std::size_t count =
      static_cast<std::size_t>(env_number("CUCORE_IFEVAL_CASES", kDefaultCases));
  const std::uint64_t seconds = env_number("CUCORE_IFEVAL_SECONDS", 0);
  const auto start = std::chrono::steady_clock::now();
  const auto out_of_time = [&] {
    return seconds != 0 &&
           std::chrono::steady_clock::now() - start >= std::chrono::seconds(seconds);
  };
  batch_result total;
  // Batches of at most 400 cases (a compile of a few thousand small headers), each --std in turn.
  for (std::size_t done = 0, part = 0; done < count && !out_of_time(); done += 400, ++part) {
    const std::size_t n = std::min<std::size_t>(400, count - done);
    for (std::size_t b = 0;
         b < kStandards.size() && total.failures < kMaxReportedFailures && !out_of_time(); ++b) {
      const batch_result r = run_batch(seed, b + part * kStandards.size(), n, kStandards[b]);
      total.cases += r.cases;
      total.dropped += r.dropped;
      total.groups += r.groups;
      total.entered += r.entered;
      total.skipped_by_walk += r.skipped_by_walk;
      total.failures += r.failures;
    }
  }
  std::printf(
      "#if differential (seed 0x%llx): %zu cases (%zu dropped: NVRTC rejected them), %zu "
      "groups, %zu entered by NVRTC, %zu skipped by the walk, %d mismatches\n",
      static_cast<unsigned long long>(seed), total.cases, total.dropped, total.groups,
      total.entered, total.skipped_by_walk, total.failures);
  // A test that could not fail checks nothing: most cases compile, and the walk does skip.
  EXPECT_GT(total.cases, total.dropped);
  EXPECT_GT(total.skipped_by_walk, total.groups / 10);
}

}  // namespace
}  // namespace cucore::oracle
