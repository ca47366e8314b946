// The include scan: every reference a preprocessor could follow (a superset), never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "key/include_scanner.hpp"

namespace cucore::detail {

// Readable failures.
void PrintTo(const include_reference& r, std::ostream* os) {
  *os << "{kind " << static_cast<int>(r.kind) << ", form " << static_cast<int>(r.form) << ", \""
      << r.name << "\", line " << r.line << "}";
}
void PrintTo(const macro_definition& d, std::ostream* os) {
  *os << "{" << d.name << " = " << d.body << ", line " << d.line << "}";
}

namespace {

using kind = include_kind;
using form = include_form;

std::vector<include_reference> refs(std::string_view text) {
  return scan_includes(text).references;
}

include_reference ref(kind k, form f, std::string name, std::uint32_t line) {
  return {k, f, std::move(name), line};
}

include_reference quoted(std::string name, std::uint32_t line = 1) {
  return ref(kind::include, form::quoted, std::move(name), line);
}

bool has_name(const std::vector<include_reference>& found, std::string_view name) {
  return std::any_of(found.begin(), found.end(),
                     [&](const include_reference& r) { return r.name == name; });
}

TEST(IncludeScanner, QuotedAndAngleNames) {
  EXPECT_EQ(refs("#include \"a.h\"\n#include <b/c.h>\n"),
            (std::vector{quoted("a.h"), ref(kind::include, form::angle, "b/c.h", 2)}));
}

TEST(IncludeScanner, EveryDirectiveWord) {
  EXPECT_EQ(refs("#include_next <a.h>\n#import \"b.h\"\n#embed \"c.bin\" limit(4)\n"),
            (std::vector{ref(kind::include_next, form::angle, "a.h", 1),
                         ref(kind::import, form::quoted, "b.h", 2),
                         ref(kind::embed, form::quoted, "c.bin", 3)}));
}

TEST(IncludeScanner, OtherDirectivesAndWordsAreNoReferences) {
  EXPECT_TRUE(refs("#includes \"a.h\"\n#pragma include \"b.h\"\n#error include \"c.h\"\n"
                   "#inc/**/lude \"d.h\"\n#define include \"e.h\"\nint include;\n")
                  .empty());
}

TEST(IncludeScanner, IntroducersAndBlanksBeforeTheWord) {
  const auto found = refs(
      "#include \"hash.h\"\n"
      "  \t#  include \"spaced.h\"\n"
      "%:include \"digraph.h\"\n"
      "\?\?=include \"trigraph.h\"\n"
      "# /* comment */ include \"commented.h\"\n"
      "#/* a\n comment over lines */include \"multiline.h\"\n"
      "%: \t include <digraph_spaced.h>\n"
      "\f\v#include \"formfeed.h\"\n");
  EXPECT_EQ(found,
            (std::vector{
                quoted("hash.h", 1), quoted("spaced.h", 2), quoted("digraph.h", 3),
                quoted("trigraph.h", 4), quoted("commented.h", 5), quoted("multiline.h", 6),
                ref(kind::include, form::angle, "digraph_spaced.h", 8), quoted("formfeed.h", 9)}));
}

TEST(IncludeScanner, DirectiveAfterACommentOnItsLine) {
  EXPECT_EQ(refs("/* x */ #include \"a.h\"\n"), std::vector{quoted("a.h")});
  EXPECT_EQ(refs("/* one */ /* two */ %:include \"b.h\"\n"), std::vector{quoted("b.h")});
  // A block comment that spans lines ends in white space with a newline: a directive may follow.
  EXPECT_EQ(refs("int x; /* a comment\n that ends here */ #include \"c.h\"\n"),
            std::vector{quoted("c.h", 2)});
  EXPECT_EQ(refs("/* see /* nested-looking */ #include \"d.h\"\n"), std::vector{quoted("d.h")});
}

TEST(IncludeScanner, HasIncludeAnywhere) {
  const auto found = refs(
      "#if __has_include(<a.h>) && __has_include_next(\"b.h\")\n"
      "#endif\n"
      "#define HAS_C __has_include(\"c.h\")\n"
      "constexpr bool d = __has_embed(\"d.bin\" limit(1));\n"
      "#if __has_include /* c */ (\n  <e.h>)\n#endif\n"
      "#if __has_include\n(<f.h>)\n#endif\n");
  EXPECT_EQ(found, (std::vector{ref(kind::has_include, form::angle, "a.h", 1),
                                ref(kind::has_include_next, form::quoted, "b.h", 1),
                                ref(kind::has_include, form::quoted, "c.h", 3),
                                ref(kind::has_embed, form::quoted, "d.bin", 4),
                                ref(kind::has_include, form::angle, "e.h", 5),
                                ref(kind::has_include, form::angle, "f.h", 8)}));
}

TEST(IncludeScanner, HasIncludeWithoutParenthesisOrWithAMacro) {
  EXPECT_EQ(refs("#ifdef __has_include\n#endif\n#if defined(__has_include)\n#endif\n"),
            (std::vector{ref(kind::has_include, form::computed, "", 1),
                         ref(kind::has_include, form::computed, "", 3)}));
  EXPECT_EQ(refs("#define HAS(x) __has_include(x)\n"),
            std::vector{ref(kind::has_include, form::computed, "x", 1)});
  EXPECT_EQ(refs("#if __has_include( HEADER( a , b ) /* c */ )\n"),
            std::vector{ref(kind::has_include, form::computed, "HEADER( a , b )", 1)});
  // Other identifiers that contain the operator's name.
  EXPECT_TRUE(refs("x__has_include(<a.h>) ___has_include(<b.h>) __has_includes(<c.h>)").empty());
}

TEST(IncludeScanner, LineSplices) {
  const auto found = refs(
      "#inc\\\nlude \"word.h\"\n"          // lines 1-2
      "#include \"na\\\nme.h\"\n"          // 3-4
      "#\\\ninclude <after_hash.h>\n"      // 5-6
      "\\\n#include \"after_splice.h\"\n"  // 7-8: the directive starts on line 8
      "#include \"crlf\\\r\n.h\"\r\n"      // 9-10
      "__has_\\\ninclude(\"has.h\")\n"     // 11-12
      "%\\\n:include \"digraph.h\"\n");    // 13-14
  EXPECT_EQ(found, (std::vector{quoted("word.h", 1), quoted("name.h", 3),
                                ref(kind::include, form::angle, "after_hash.h", 5),
                                quoted("after_splice.h", 8), quoted("crlf.h", 9),
                                ref(kind::has_include, form::quoted, "has.h", 11),
                                quoted("digraph.h", 13)}));
}

TEST(IncludeScanner, SpliceContinuesALineComment) {
  // The directive is part of the comment for every compiler: not listed (nothing starts its line).
  EXPECT_TRUE(refs("int x; // comment \\\n#include \"a.h\"\n").empty());
}

TEST(IncludeScanner, LenientSplicesAddTheirReading) {
  // GCC splices backslash-blank-newline; strict compilers do not: both readings are listed.
  const auto found = refs("#define X \\ \n#include \"a.h\"\n#inc\\ \nlude \"b.h\"\n");
  EXPECT_TRUE(has_name(found, "a.h"));
  EXPECT_TRUE(has_name(found, "b.h"));
  const auto trigraph = refs("#inc\?\?/\nlude \"c.h\"\n");
  EXPECT_EQ(trigraph, std::vector{quoted("c.h", 1)});
}

TEST(IncludeScanner, CommentsAndLiteralsListNothingInsideALine) {
  EXPECT_TRUE(refs("int a; // #include \"a.h\"\n"
                   "int b; /* #include \"b.h\" */\n"
                   "const char* c = \"#include <c.h>\";\n"
                   "char d = '#'; int e; // include \"e.h\"\n")
                  .empty());
}

TEST(IncludeScanner, RawPassListsDirectivesThatStartALineInsideCommentsAndLiterals) {
  // Harmless extras: no misreading of a literal or comment can hide a line's directive.
  const auto found = refs(
      "/*\n#include \"in_comment.h\"\n*/\n"
      "auto s = u8R\"x(\n#include <in_raw_string.h>\n)x\";\n"
      "auto t = LR\"(\n  %:include \"in_wide_raw.h\"\n)\";\n"
      "// __has_include(\"in_line_comment.h\")\n");
  EXPECT_EQ(found, (std::vector{quoted("in_comment.h", 2),
                                ref(kind::include, form::angle, "in_raw_string.h", 5),
                                quoted("in_wide_raw.h", 8),
                                ref(kind::has_include, form::quoted, "in_line_comment.h", 10)}));
}

TEST(IncludeScanner, ApostropheInSkippedTextHidesNothing) {
  EXPECT_EQ(refs("#if 0\ndon't \"do\" /* this\n#endif\n#include \"a.h\"\n"),
            std::vector{quoted("a.h", 4)});
  EXPECT_EQ(refs("auto x = 1'000'000;\n#include \"b.h\"\n"), std::vector{quoted("b.h", 2)});
}

TEST(IncludeScanner, HeaderNameForms) {
  EXPECT_EQ(refs("#include \" spaced name.h \" trailing tokens\n"),
            std::vector{quoted(" spaced name.h ")});
  EXPECT_EQ(refs("#include <a b/c.h> more\n"),
            std::vector{ref(kind::include, form::angle, "a b/c.h", 1)});
  EXPECT_EQ(refs("#include\"tight.h\"\n#include<tight2.h>\n"),
            (std::vector{quoted("tight.h"), ref(kind::include, form::angle, "tight2.h", 2)}));
  // No escapes in header names; a comment opener inside one is part of the name.
  EXPECT_EQ(refs("#include \"dir\\file.h\"\n"), std::vector{quoted("dir\\file.h")});
  EXPECT_EQ(refs("#include <a//b.h>\n"), std::vector{ref(kind::include, form::angle, "a//b.h", 1)});
  EXPECT_EQ(refs("#include /* c */ \"after_comment.h\" // c\n"),
            std::vector{quoted("after_comment.h")});
}

TEST(IncludeScanner, ComputedOperands) {
  EXPECT_EQ(refs("#include \"unterminated.h\n"),
            std::vector{ref(kind::include, form::computed, "\"unterminated.h", 1)});
  EXPECT_EQ(refs("#include <unterminated.h\n"),
            std::vector{ref(kind::include, form::computed, "<unterminated.h", 1)});
  EXPECT_EQ(refs("#include   HEADER  /* c */\tOTHER // c\n"),
            std::vector{ref(kind::include, form::computed, "HEADER OTHER", 1)});
  EXPECT_EQ(refs("#include MAKE(a, \"b /* c */\")\n"),
            std::vector{ref(kind::include, form::computed, "MAKE(a, \"b /* c */\")", 1)});
  EXPECT_EQ(refs("#include LT a.h GT\n"),
            std::vector{ref(kind::include, form::computed, "LT a.h GT", 1)});
  EXPECT_EQ(refs("#include\n#include // c\n#include"),
            (std::vector{ref(kind::include, form::computed, "", 1),
                         ref(kind::include, form::computed, "", 2),
                         ref(kind::include, form::computed, "", 3)}));
  EXPECT_EQ(refs("#include \\\n  SPLICED \\\n  NAME\n"),
            std::vector{ref(kind::include, form::computed, "SPLICED NAME", 1)});
}

TEST(IncludeScanner, Definitions) {
  const auto scan = scan_includes(
      "#define HEADER \"a.h\"\n"
      "#define ANGLE <cuda/std/b.h>\n"
      "#define ALIAS HEADER\n"
      "#define PATH cuda/std/__type_traits/c.h\n"
      "#define COMMENTED /* c */ \"d.h\" // c\n"
      "#  define  SPLICED \\\n  \"e.h\"\n"
      "#define F(x) \"f.h\"\n"
      "#define GUARD_H\n"
      "#define VALUE 1 + 2\n"
      "#define CALL f(x)\n"
      "#define OBJ (x)\n"
      "#if 0\n#define HIDDEN \"g.h\"\n#endif\n"
      "%:define DIGRAPH <h.h>\n");
  EXPECT_EQ(scan.definitions,
            (std::vector<macro_definition>{{"HEADER", "\"a.h\"", 1},
                                           {"ANGLE", "<cuda/std/b.h>", 2},
                                           {"ALIAS", "HEADER", 3},
                                           {"PATH", "cuda/std/__type_traits/c.h", 4},
                                           {"COMMENTED", "\"d.h\"", 5},
                                           {"SPLICED", "\"e.h\"", 6},
                                           {"HIDDEN", "\"g.h\"", 14},
                                           {"DIGRAPH", "<h.h>", 16}}));
  EXPECT_TRUE(scan.references.empty());
}

TEST(IncludeScanner, DuplicatesOnOneLineKeepOneEachLineKeepsItsOwn) {
  // One line: one reference. Other lines keep theirs (each may sit in its own #if group).
  EXPECT_EQ(refs("#include \"a.h\" /* */ #include \"a.h\"\n#include <a.h>\n#include \"a.h\"\n"
                 "#if __has_include(\"a.h\")\n#include_next \"a.h\"\n"),
            (std::vector{quoted("a.h", 1), ref(kind::include, form::angle, "a.h", 2),
                         quoted("a.h", 3), ref(kind::has_include, form::quoted, "a.h", 4),
                         ref(kind::include_next, form::quoted, "a.h", 5)}));
  // Past the linear check's size too.
  std::string many;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 100; ++i) {
      many += "#include \"h" + std::to_string(i) + ".h\" /**/ #include \"h" + std::to_string(i) +
              ".h\"\n";
    }
  }
  const auto found = refs(many);
  ASSERT_EQ(found.size(), 200U);
  EXPECT_EQ(found[99], quoted("h99.h", 100));
  EXPECT_EQ(found[199], quoted("h99.h", 200));
  EXPECT_EQ(found[99], quoted("h99.h", 100));
}

TEST(IncludeScanner, LineEndings) {
  EXPECT_EQ(refs("\r\n\r\n#include \"crlf.h\"\r\n"), std::vector{quoted("crlf.h", 3)});
  // A lone CR ends a line for some compilers: both directives are listed.
  const auto found = refs("#include \"a.h\"\r#include \"b.h\"\r");
  EXPECT_TRUE(has_name(found, "a.h"));
  EXPECT_TRUE(has_name(found, "b.h"));
  EXPECT_EQ(refs("\xEF\xBB\xBF#include \"bom.h\"\n"), std::vector{quoted("bom.h")});
  // GCC ignores NUL bytes as white space.
  EXPECT_EQ(refs(std::string_view("\0#include \"nul.h\"\n", 18)), std::vector{quoted("nul.h")});
}

TEST(IncludeScanner, OddInputDoesNotCrash) {
  const std::vector<std::string> inputs = {
      "",
      "#",
      "\\",
      "#include",
      "#include \"",
      "#include <",
      "__has_include",
      "__has_include(",
      "__has_include(\"a.h",
      "__has_include((((",
      "/*",
      "#include /*",
      "#define",
      "#define X",
      "#define X(",
      "R\"abc(unterminated raw string",
      "#include \"a.h\"\\",
      "\?\?=",
      "\?\?/",
      "%:",
      "%",
      std::string("#include \"a\0b.h\"\n", 17),
      "\xff\xfe#include \"\xc3\x28.h\"\n",
      "\r\r\r#include \"a.h\"\r",
      std::string(100000, '#'),
      std::string(100000, '\\'),
      "#include " + std::string(100000, 'x'),
      "#include \"" + std::string(100000, 'x') + "\"",
      [] {
        std::string s;
        for (int i = 0; i < 5000; ++i) s += "/**/#include /*";
        return s;
      }(),
      [] {
        std::string s;
        for (int i = 0; i < 5000; ++i) s += "__has_include(";
        return s;
      }(),
  };
  for (const auto& input : inputs) {
    const auto scan = scan_includes(input);
    for (const auto& r : scan.references) {
      EXPECT_LE(std::size_t{r.line},
                static_cast<std::size_t>(std::count(input.begin(), input.end(), '\n')) + 1);
      if (r.form != form::computed) {
        EXPECT_EQ(r.name.find('\n'), std::string::npos);
      }
    }
  }
  // A quoted name longer than an operand is read is computed, not dropped.
  const auto long_name = refs("#include \"" + std::string(100000, 'x') + "\"");
  ASSERT_EQ(long_name.size(), 1U);
  EXPECT_EQ(long_name[0].form, form::computed);
}

TEST(IncludeScanner, MayReferenceFiles) {
  EXPECT_FALSE(may_reference_files(""));
  EXPECT_FALSE(may_reference_files(
      "__global__ void k(__half* x, int n) { x[n % 2] = n ? x[0] : __half(1); printf(\"\\n\"); }"));
  EXPECT_TRUE(may_reference_files("#include <a.h>"));
  EXPECT_TRUE(may_reference_files("int x;\n#define X 1"));
  EXPECT_TRUE(may_reference_files("%:include <a.h>"));
  EXPECT_TRUE(may_reference_files("\?\?=include <a.h>"));
  EXPECT_TRUE(may_reference_files("constexpr bool b = __has_include(<a.h>);"));
  // A splice can join the pieces of an introducer or operator.
  EXPECT_TRUE(may_reference_files("%\\\n:include <a.h>"));
  EXPECT_TRUE(may_reference_files("__ha\\\ns_include(<a.h>)"));
  EXPECT_TRUE(may_reference_files("__ha\\ \ns_include(<a.h>)"));
  // Whatever lies past the vectorised part.
  for (std::size_t pad = 0; pad < 40; ++pad) {
    EXPECT_TRUE(may_reference_files(std::string(pad, ' ') + "__has_"));
    EXPECT_TRUE(may_reference_files(std::string(pad, ' ') + "#"));
    EXPECT_FALSE(may_reference_files(std::string(pad, ' ') + "__ha"));
  }
}

// Random texts built from fragments that matter to the scan: whatever scan_includes finds,
// may_reference_files must allow; every directive that starts a line with a quoted name (the
// naive reading) must be found; no crash.
TEST(IncludeScanner, RandomFragmentsAgainstANaiveReading) {
  const std::vector<std::string> fragments = {"#include \"a.h\"",
                                              "#include <b.h>",
                                              "# include \"c.h\"",
                                              "%:include \"d.h\"",
                                              "__has_include(\"e.h\")",
                                              "\n",
                                              "\n",
                                              "\r\n",
                                              "\\\n",
                                              "\\",
                                              "/*",
                                              "*/",
                                              "//",
                                              "\"",
                                              "'",
                                              "R\"x(",
                                              ")x\"",
                                              " ",
                                              "\t",
                                              "int x;",
                                              "#define M \"f.h\"",
                                              "#if 0",
                                              "#endif",
                                              "?\?=",
                                              "%:",
                                              "__has_",
                                              "(",
                                              ")",
                                              "<",
                                              ">",
                                              std::string(1, '\0'),
                                              "\xff"};
  std::mt19937 rng(12345);
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int pieces = static_cast<int>(rng() % 40);
    for (int i = 0; i < pieces; ++i) text += fragments[rng() % fragments.size()];
    const auto scan = scan_includes(text);
    if (!scan.references.empty() || !scan.definitions.empty()) {
      ASSERT_TRUE(may_reference_files(text)) << text;
    }
    // The naive reading: lines (no splices in them) that are exactly a quoted #include.
    std::size_t start = 0;
    while (start <= text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(start, end - start);
      const bool spliced_in = (start >= 2 && text[start - 2] == '\\') ||
                              (start >= 3 && text[start - 3] == '\\' && text[start - 2] == '\r');
      if (!spliced_in && line.rfind("#include \"a.h\"", 0) == 0) {
        ASSERT_TRUE(has_name(scan.references, "a.h")) << text;
      }
      start = end + 1;
    }
  }
}

}  // namespace
}  // namespace cucore::detail
