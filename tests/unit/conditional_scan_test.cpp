// The conditional scan on its own (no compiler): the #if arithmetic and the structure's reading
// for each class issue 31 found stale. NVRTC's own answers are in tests/oracle/ifeval_oracle_test.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "key/conditional_scan.hpp"

namespace cucore::detail {
namespace {

const auto kNothingDefined = [](std::string_view name) { return reserved_identifier(name); };

truth eval(std::string_view condition) {
  return evaluate_condition(condition, kNothingDefined);
}

// Whether line `line` of `text` is in a group never entered, nothing but reserved names defined.
bool never_entered(std::string_view text, std::uint32_t line,
                   const std::function<bool(std::string_view)>& defined = kNothingDefined) {
  const conditional_structure s = scan_conditionals(text);
  return conditional_pruner(s, defined).never_entered(line);
}

TEST(ConditionalScan, ArithmeticIsIntmaxOrUintmaxWithTheUsualConversions) {
  EXPECT_EQ(eval("if -1 > 0u"), truth::is_true);
  EXPECT_EQ(eval("if ~0u > 0"), truth::is_true);
  EXPECT_EQ(eval("if (0u-1) > 0"), truth::is_true);
  EXPECT_EQ(eval("if (1 ? -1 : 0u) > 0"), truth::is_true);
  EXPECT_EQ(eval("elif -2/2u > 0"), truth::is_true);
  EXPECT_EQ(eval("if -1 < 0u"), truth::is_false);
  EXPECT_EQ(eval("if -1 > 0x80000000"), truth::is_true);  // unsigned int
  EXPECT_EQ(eval("if -1 > 0x7fffffff"), truth::is_false);
  EXPECT_EQ(eval("if -1 > 0x80000000l"), truth::is_false);         // long
  EXPECT_EQ(eval("if -1 > 4294967295"), truth::is_false);          // decimal: long
  EXPECT_EQ(eval("if -1 > 0xffffffffffffffff"), truth::is_false);  // equal
  EXPECT_EQ(eval("if 1 << 2 == 4 && (1u << 63) > 0 && -1 < 0"), truth::is_true);
  EXPECT_EQ(eval("if (0 ? 1u : -1) < 0"), truth::is_false);
  EXPECT_EQ(eval("if -1 < 0"), truth::is_true);
  // Undefined or implementation-defined: unknown.
  EXPECT_EQ(eval("if 1 / 0"), truth::unknown);
  EXPECT_EQ(eval("if 9223372036854775807 + 1"), truth::unknown);
  EXPECT_EQ(eval("if 1 << 64"), truth::unknown);
  EXPECT_EQ(eval("if -1 >> 1"), truth::unknown);
  EXPECT_EQ(eval("if 18446744073709551615"), truth::unknown);  // decimal past INT64_MAX
  EXPECT_EQ(eval("if 1lul"), truth::unknown);
  EXPECT_EQ(eval("if 1'0"), truth::unknown);  // a separator only from C++14 on
  EXPECT_EQ(eval("if (1, 0)"), truth::unknown);
  EXPECT_EQ(eval("if 'a'"), truth::unknown);
  // Short-circuits and a ?: whose condition is unknown but whose branches agree.
  EXPECT_EQ(eval("if 0 && 'a'"), truth::is_false);
  EXPECT_EQ(eval("if __has_include(<x>) ? 1 : 1u"), truth::is_true);
}

TEST(ConditionalScan, TrueAndFalseMayBeMacros) {
  EXPECT_EQ(eval("if true && !false"), truth::is_true);
  const auto booleans = [](std::string_view n) { return n == "true" || n == "false"; };
  EXPECT_EQ(evaluate_condition("if !true", booleans), truth::unknown);
  const std::string text = "#define true 0\n#if !true\n#include \"h.h\"\n#endif\n";
  EXPECT_TRUE(never_entered(text, 3));             // while nothing defines true...
  EXPECT_FALSE(never_entered(text, 3, booleans));  // ...and not once something may
}

TEST(ConditionalScan, ChainsWithElifdefAreNotDecided) {
  // NVRTC 13.0 ignores #elifndef in the #if 0 group and enters the #else.
  const std::string text =
      "#if 0\n#include \"a.h\"\n#elifndef NOPE\n#include \"b.h\"\n"
      "#else\n#include \"c.h\"\n#endif\n#if 0\n#include \"d.h\"\n#endif\n";
  EXPECT_FALSE(never_entered(text, 2));
  EXPECT_FALSE(never_entered(text, 4));
  EXPECT_FALSE(never_entered(text, 6));
  EXPECT_TRUE(never_entered(text, 9));  // another chain still is
}

TEST(ConditionalScan, DollarAndUtf8EndAnIdentifierBeforeARawString) {
  for (const std::string prefix : {"$", "\xc3\xa9", "x\xc3\xa9"}) {
    const std::string text =
        "#if 0\n" + prefix + "R\"(\n#else\n)\"\n#else\n#include \"h.h\"\n#endif\n";
    EXPECT_FALSE(never_entered(text, 6)) << prefix;
  }
  // NVRTC defines X (its identifier ends at '$'); the include scanner's lenient reading, X$Y, is
  // listed too, so that the names stay a superset of the scanner's definitions.
  EXPECT_EQ(defined_names("#define X$Y 1\n"), (std::vector<std::string>{"X", "X$Y"}));
}

TEST(ConditionalScan, ReadingsThatDependOnTheStandardAreNotTrusted) {
  // A raw string under C++03 is a name and a string: the readings differ, nothing is skipped.
  const std::string raw = "#if 1\n#else\nR\"(\n#endif\n#include \"h.h\"\n#if 0\n)\"\n#endif\n";
  EXPECT_FALSE(scan_conditionals(raw).known);
  // One that reads the same both ways still counts.
  const std::string same = "#if 0\n#include \"h.h\"\n#endif\nconst char* s = R\"(x)\";\n";
  EXPECT_TRUE(scan_conditionals(same).known);
  EXPECT_TRUE(never_entered(same, 2));
  // An apostrophe that may be a digit separator, a comment opener after it on the line.
  EXPECT_FALSE(scan_conditionals("#if 0\n1'0'/*\n#else\n*/\n#else\n#endif\n").known);
  EXPECT_FALSE(scan_conditionals("#if 1'0 /* '\n#endif\n*/\n#endif\n").known);
  // Separators with nothing to hide on their line are read either way alike.
  EXPECT_TRUE(scan_conditionals("#if 0\nint x = 1'000'000;\n#endif\n").known);
}

}  // namespace
}  // namespace cucore::detail
