// Automatic precompiled headers (pch/auto_pch.hpp, docs/compilation.md "Precompiled headers"),
// with real NVRTC compiles on the CPU: every output and log with an automatic PCH equals the
// compile without one; an edited, shadowed or deleted header, another program name, a changed or
// damaged PCH file, a PCH heap too small, a prefix whose headers warn, and many threads at once
// never let an image built from other contents be used; the prefix scan stops no earlier than
// NVRTC's header stop.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/program.hpp"
#include "pch/auto_pch.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using detail::scan_pch_prefix;
using testing::contains;
using testing::temp_dir;
using testing::write_text;

extern "C" char** environ;

// ---- the prefix scan ------------------------------------------------------------------------

std::string prefix_of(std::string_view code) {
  const auto s = scan_pch_prefix(code);
  EXPECT_TRUE(s.balanced) << code;
  return std::string(code.substr(0, s.end));
}

TEST(PchPrefix, EndsAfterTheLastDirectiveBeforeTheFirstToken) {
  EXPECT_EQ(prefix_of("#include <a.h>\n#include \"b.h\"\n\n// c\nint x;\n#include <c.h>\n"),
            "#include <a.h>\n#include \"b.h\"\n");
  EXPECT_TRUE(scan_pch_prefix("#include <a.h>\nint x;\n").includes);
  EXPECT_EQ(prefix_of("int x;\n#include <a.h>\n"), "");
  EXPECT_FALSE(scan_pch_prefix("int x;\n#include <a.h>\n").includes);
  EXPECT_EQ(prefix_of("#define A 1\n#pragma once\n"), "#define A 1\n#pragma once\n");
  EXPECT_EQ(prefix_of("#include <a.h>"), "#include <a.h>") << "no newline at the end";
  EXPECT_EQ(prefix_of("\xEF\xBB\xBF#include <a.h>\nint x;"), "\xEF\xBB\xBF#include <a.h>\n");
  EXPECT_TRUE(scan_pch_prefix("%:include <a.h>\nint x;").includes) << "digraph";
  EXPECT_TRUE(scan_pch_prefix("  #  include_next <a.h>\nint x;").includes);
  EXPECT_TRUE(scan_pch_prefix("#import <a.h>\nint x;").includes);
}

TEST(PchPrefix, CommentsAndSplicesBelongToTheLinesTheyJoin) {
  // A block comment over lines: the code after it is still a token.
  EXPECT_EQ(prefix_of("#include <a.h>\n/* x\n#include <b.h>\n*/ int y;\n"), "#include <a.h>\n");
  // A block comment inside a directive carries the directive to the next line.
  EXPECT_EQ(prefix_of("#include <a.h> /* x\nint y; */\n#include <b.h>\nint z;\n"),
            "#include <a.h> /* x\nint y; */\n#include <b.h>\n");
  // A splice joins a directive with the next line; a comment before '#' leaves it a directive.
  EXPECT_EQ(prefix_of("#define A \\\n  1\n/* c */ #include <b.h>\nint z;\n"),
            "#define A \\\n  1\n/* c */ #include <b.h>\n");
  EXPECT_EQ(prefix_of("#define A \\\r\n  1\r\nint z;\r\n"), "#define A \\\r\n  1\r\n");
  // Several splices: the prefix ends where the code has it, splices counted.
  EXPECT_EQ(prefix_of("#define A \\\n\\\n 1\n#define B \\\r\n 2\nint z;"),
            "#define A \\\n\\\n 1\n#define B \\\r\n 2\n");
  // A line comment spliced onto the next line hides it.
  EXPECT_EQ(prefix_of("#include <a.h>\n// c \\\nint y;\n#include <b.h>\nint z;"),
            "#include <a.h>\n// c \\\nint y;\n#include <b.h>\n");
  // Literals in directives: "/*" in a string opens no comment, an apostrophe ends at the line.
  EXPECT_EQ(prefix_of("#define S \"/*\"\nint y; /* */\n"), "#define S \"/*\"\n");
  EXPECT_EQ(prefix_of("#error don't\n#include <b.h>\nint y;"), "#error don't\n#include <b.h>\n");
}

TEST(PchPrefix, TokensInsideIfGroupsDoNotEndIt) {
  // NVRTC skips groups it does not enter: the scan reads on to a token at depth 0.
  EXPECT_EQ(prefix_of("#if 0\nint x;\n#endif\n#include <b.h>\nint y;\n"),
            "#if 0\nint x;\n#endif\n#include <b.h>\n");
  EXPECT_EQ(prefix_of("#ifdef A\n#ifndef B\nint x;\n#endif\n#endif\nint y;\n"),
            "#ifdef A\n#ifndef B\nint x;\n#endif\n#endif\n");
  // A raw string in a group may hold what looks like a directive.
  EXPECT_EQ(prefix_of("#if 1\nconst char* s = R\"x(\n#endif\n)x\";\n#endif\nint y;\n"),
            "#if 1\nconst char* s = R\"x(\n#endif\n)x\";\n#endif\n");
  // Unterminated: everything is the prefix.
  EXPECT_EQ(prefix_of("#if 1\nint x;\n"), "#if 1\nint x;\n");
}

TEST(PchPrefix, UnclearTextGivesNoPrefix) {
  EXPECT_FALSE(scan_pch_prefix("#endif\n#include <a.h>\nint x;").balanced);
  // Splices only some compilers take (backslash, blanks, newline; the ??/ trigraph), and a
  // carriage return alone: where the line ends is unclear, so no prefix.
  EXPECT_FALSE(scan_pch_prefix("#include <a.h>\n// c \\ \n#if 0\nint y;\n#endif\nint z;").balanced);
  EXPECT_FALSE(scan_pch_prefix("#include <a.h>\n// c ?\?/\n#if 0\nint z;\n#endif").balanced);
  EXPECT_FALSE(scan_pch_prefix("#include <a.h>\r#if 0\rint y;\r#endif\nint z;").balanced);
  EXPECT_TRUE(scan_pch_prefix("#line 3 \"x\"\n#include <a.h>\nint z;").line_marker);
  EXPECT_TRUE(scan_pch_prefix("# 3 \"x\"\n#include <a.h>\nint z;").line_marker);
  // A trigraph '#' reads as a directive (a token from C++17 on: the scan only reads further).
  EXPECT_EQ(prefix_of("?\?=include <a.h>\nint z;"), "?\?=include <a.h>\n");
}

// NVRTC as the judge: it makes an image of program P's prefix (its header stop being its own),
// then compiles Q = P's prefix as scanned + a token. NVRTC uses an image only for a program whose
// leading directives begin with the image's; so it uses P's for Q exactly when the scan did not
// end before NVRTC's header stop (an image made from more headers than the scan saw would be
// keyed without them).
TEST(PchPrefix, NeverEndsBeforeNvrtcsHeaderStop) {
  temp_dir dir;
  const fs::path inc = dir / "inc";
  fs::create_directories(inc);
  for (const char* h : {"a.h", "b.h", "c.h"}) {
    write_text(inc / h,
               std::string("#pragma once\n#include <cuda/std/cstdint>\n__device__ inline int ") +
                   h[0] + "_value() { return 1; }\n");
  }
  const std::vector<std::string> cases = {
      "#include <a.h>\n#include \"b.h\"\n\n// c\n__device__ int x;\n#include <c.h>\n",
      "#if 0\nint x;\n#endif\n#include <b.h>\n__device__ int y;\n",
      "#include <a.h>\n/* x\n#include <b.h>\n*/ __device__ int y;\n",
      "#include <a.h> /* x\nint y; */\n#include <b.h>\n__device__ int z;\n",
      "#define A \\\n  1\n/* c */ #include <b.h>\n__device__ int z;\n",
      "#include <a.h>\n// c \\\nint y;\n#include <b.h>\n__device__ int z;\n",
      "#define S \"/*\"\n#include <b.h>\n__device__ int y; /* */\n",
      "#ifdef A\n#ifndef B\nint x;\n#endif\n#endif\n#include <b.h>\n__device__ int y;\n",
      "%:include <a.h>\n#include <b.h>\n__device__ int x;\n",
      "#include <a.h>\n#ifndef NOTHING\n#include <b.h>\n#endif\n#include <c.h>\n__device__ int "
      "q;\n",
  };
  int judged = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i]);
    const fs::path pch = dir / ("pch" + std::to_string(i));
    fs::create_directories(pch);
    program_options o;
    o.arch = testing::kArch;
    o.std = "c++17";
    o.name = "p.cu";
    o.include_path = {inc.string()};
    o.pch = true;
    o.pch_dir = pch.string();
    o.pch_messages = true;
    program p(cases[i], source_type::cxx, o);
    p.compile(code_type::ptx);
    if (p.last_pch_status() != pch_status::created) continue;  // no image: nothing to go stale
    ++judged;
    const auto s = scan_pch_prefix(cases[i]);
    ASSERT_TRUE(s.balanced);
    const std::string q = cases[i].substr(0, s.end) + "\n__device__ int cucore_header_stop;\n";
    program later(q, source_type::cxx, o);
    later.compile(code_type::ptx);
    EXPECT_TRUE(contains(later.log(), "using precompiled header file"))
        << "NVRTC did not take the image for the scanned prefix: its header stop is later\n"
        << later.log();
  }
  EXPECT_GE(judged, 8);
}

// ---- compiles -------------------------------------------------------------------------------

// Byte strings compared without printing them (cubins are binary).
::testing::AssertionResult same_bytes(const std::string& a, const std::string& b) {
  if (a == b) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the outputs differ (" << a.size() << " and " << b.size() << " bytes)";
}

// A header tree in a temporary directory, programs over it, and plain references.
struct fixture {
  temp_dir dir;
  fs::path inc = dir / "inc";
  fixture() { fs::create_directories(inc); }

  program_options options(const std::string& name = "prog.cu") const {
    program_options o;
    o.arch = testing::kArch;
    o.std = "c++17";
    o.name = name;
    o.include_path = {inc.string()};
    return o;
  }
};

// A header with a value the kernel uses, and enough of libcu++ that a PCH is worth making.
std::string header_with(int value) {
  return "#pragma once\n#include <cuda/std/cstdint>\n#include <cuda/std/limits>\n"
         "__device__ inline cuda::std::int32_t value() { return " +
         std::to_string(value) + "; }\n";
}

std::string kernel(const std::string& name,
                   const std::string& prefix = "#include \"value.cuh\"\n") {
  return prefix + "extern \"C\" __global__ void " + name +
         "(int* out) { out[threadIdx.x] = value() + cuda::std::numeric_limits<int>::digits; }\n";
}

struct compiled {
  std::string bytes;
  std::string log;
  auto_pch_status status = auto_pch_status::off;
};

compiled compile(const std::string& code, const program_options& o,
                 code_type target = code_type::cubin, std::vector<std::string> names = {}) {
  program p(code, source_type::cxx, o);
  const object_code out = p.compile(target, names);
  const auto b = out.code();
  return {std::string(reinterpret_cast<const char*>(b.data()), b.size()), p.log(),
          p.last_auto_pch()};
}

compiled plain(const std::string& code, program_options o, code_type target = code_type::cubin,
               std::vector<std::string> names = {}) {
  o.auto_pch = false;
  compiled c = compile(code, o, target, std::move(names));
  EXPECT_EQ(c.status, auto_pch_status::off);
  return c;
}

// Compiles `code` until its prefix has an image: a first sighting, then the compile that makes it.
void make_image(const std::string& code, const program_options& o) {
  const compiled first = compile(code, o);
  ASSERT_EQ(first.status, auto_pch_status::first_seen) << to_string(first.status);
  const compiled second = compile(code, o);
  ASSERT_EQ(second.status, auto_pch_status::created) << to_string(second.status) << second.log;
}

class AutoPch : public ::testing::Test {
 protected:
  void SetUp() override { clear_auto_pch(); }
  void TearDown() override { clear_auto_pch(); }
};

TEST_F(AutoPch, LaterCompilesOfAPrefixStartFromItsImageWithThePlainBytes) {
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const auto o = f.options();
  const std::string a = kernel("ka"), b = kernel("kb");
  const compiled plain_a = plain(a, o), plain_b = plain(b, o);

  const compiled a1 = compile(a, o);
  EXPECT_EQ(a1.status, auto_pch_status::first_seen);
  const compiled a2 = compile(a, o);
  EXPECT_EQ(a2.status, auto_pch_status::created) << a2.log;
  EXPECT_EQ(detail::auto_pch_state().images, 1u);
  const compiled b1 = compile(b, o);
  EXPECT_EQ(b1.status, auto_pch_status::used) << "another kernel with the same #include lines";
  const compiled a3 = compile(a, o);
  EXPECT_EQ(a3.status, auto_pch_status::used);
  for (const auto* c : {&a1, &a2, &a3}) {
    EXPECT_TRUE(same_bytes(c->bytes, plain_a.bytes));
    EXPECT_EQ(c->log, plain_a.log);
  }
  EXPECT_TRUE(same_bytes(b1.bytes, plain_b.bytes));
  EXPECT_EQ(b1.log, plain_b.log);
}

TEST_F(AutoPch, NvrtcReadsTheImageItIsOffered) {
  // pch_messages=true (the caller's): NVRTC says which file it created and used.
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  auto o = f.options();
  o.pch_messages = true;
  compile(kernel("ka"), o);
  const compiled made = compile(kernel("ka"), o);
  ASSERT_EQ(made.status, auto_pch_status::created);
  EXPECT_TRUE(
      contains(made.log, "creating precompiled header file \"" + detail::auto_pch_state().root))
      << made.log;
  const compiled used = compile(kernel("kb"), o);
  ASSERT_EQ(used.status, auto_pch_status::used);
  EXPECT_TRUE(
      contains(used.log, "using precompiled header file \"" + detail::auto_pch_state().root))
      << used.log;
}

TEST_F(AutoPch, TheKeyAndTheCachedBytesAreThoseOfAPlainCompile) {
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  auto o = f.options();
  const std::string code = kernel("ka");
  program_cache_key_inputs in;
  in.code = code;
  in.options = o;
  const auto unset = make_program_cache_key(in);
  in.options.auto_pch = true;
  EXPECT_EQ(make_program_cache_key(in), unset) << "auto_pch is no flag and no key field";
  in.options.auto_pch = false;
  EXPECT_EQ(make_program_cache_key(in), unset);

  const compiled reference = plain(kernel("ka"), o);
  in_memory_program_cache memory;
  // A directory cache's prefix keys read its persistent header digest memo.
  file_stream_program_cache directory(f.dir / "cache");
  for (program_cache* cache :
       {static_cast<program_cache*>(&memory), static_cast<program_cache*>(&directory)}) {
    clear_auto_pch();
    std::vector<auto_pch_status> seen;
    for (int i = 0; i < 3; ++i) {  // first sighting, the image made, the image used
      cache->clear();
      program p(kernel("ka"), source_type::cxx, o);
      const object_code miss = p.compile(code_type::cubin, *cache);
      EXPECT_EQ(p.last_cache_outcome(), cache_outcome::miss);
      const auto b = miss.code();
      EXPECT_TRUE(same_bytes(std::string(reinterpret_cast<const char*>(b.data()), b.size()),
                             reference.bytes))
          << to_string(p.last_auto_pch());
      seen.push_back(p.last_auto_pch());
    }
    EXPECT_EQ(seen,
              (std::vector<auto_pch_status>{auto_pch_status::first_seen, auto_pch_status::created,
                                            auto_pch_status::used}));
  }
}

// NVRTC never checks whether a header changed since the image was made: cucore must.
TEST_F(AutoPch, AnEditedHeaderIsNeverCompiledFromTheOldImage) {
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const auto o = f.options();
  make_image(kernel("ka"), o);
  const std::string before = plain(kernel("kb"), o).bytes;
  write_text(f.inc / "value.cuh", header_with(9));  // same size: only the contents tell
  const compiled reference = plain(kernel("kb"), o);
  ASSERT_FALSE(same_bytes(reference.bytes, before))
      << "the edit must change the output for this test to show";
  const compiled after = compile(kernel("kb"), o);
  EXPECT_NE(after.status, auto_pch_status::used);
  EXPECT_TRUE(same_bytes(after.bytes, reference.bytes)) << to_string(after.status);
  const compiled again = compile(kernel("kb"), o);
  EXPECT_EQ(again.status, auto_pch_status::used) << "the new contents' image";
  EXPECT_TRUE(same_bytes(again.bytes, reference.bytes));
}

TEST_F(AutoPch, AHeaderAddedEarlierInTheSearchPathIsNeverCompiledFromTheOldImage) {
  fixture f;
  const fs::path first = f.dir / "first";
  fs::create_directories(first);
  write_text(f.inc / "value.cuh", header_with(7));
  auto o = f.options();
  o.include_path = {first.string(), f.inc.string()};
  make_image(kernel("ka"), o);
  const std::string before = plain(kernel("kb"), o).bytes;
  write_text(first / "value.cuh", header_with(11));  // now found before inc/value.cuh
  const compiled reference = plain(kernel("kb"), o);
  ASSERT_FALSE(same_bytes(reference.bytes, before));
  const compiled added = compile(kernel("kb"), o);
  EXPECT_NE(added.status, auto_pch_status::used);
  EXPECT_TRUE(same_bytes(added.bytes, reference.bytes));
  EXPECT_EQ(compile(kernel("kb"), o).status, auto_pch_status::used);
}

TEST_F(AutoPch, ADeletedHeaderIsNeverCompiledFromTheOldImage) {
  fixture f;
  const fs::path first = f.dir / "first";
  fs::create_directories(first);
  write_text(f.inc / "value.cuh", header_with(7));
  write_text(first / "value.cuh", header_with(11));  // found before inc/value.cuh
  auto o = f.options();
  o.include_path = {first.string(), f.inc.string()};
  make_image(kernel("ka"), o);
  const std::string before = plain(kernel("kb"), o).bytes;
  fs::remove(first / "value.cuh");  // inc/value.cuh now
  const compiled reference = plain(kernel("kb"), o);
  ASSERT_FALSE(same_bytes(reference.bytes, before));
  const compiled deleted = compile(kernel("kb"), o);
  EXPECT_NE(deleted.status, auto_pch_status::used);
  EXPECT_TRUE(same_bytes(deleted.bytes, reference.bytes));
}

TEST_F(AutoPch, AnotherProgramNameHasItsOwnImage) {
  // __BASE_FILE__ in a header is the program's name, fixed in the image at its making (other
  // names that cannot reach an image share it: auto_pch_names_test.cpp).
  fixture f;
  write_text(f.inc / "value.cuh",
             "#pragma once\n#include <cuda/std/cstdint>\n"
             "__device__ inline const char* base() { return __BASE_FILE__; }\n"
             "__device__ inline int value() { return 3; }\n");
  const std::string code =
      "#include \"value.cuh\"\nextern \"C\" __global__ void k(const char** o) { *o = base(); }\n";
  make_image(code, f.options("one.cu"));
  const compiled reference = plain(code, f.options("two.cu"));
  const compiled two = compile(code, f.options("two.cu"));
  EXPECT_NE(two.status, auto_pch_status::used);  // its own image (the prefix is seen again)
  EXPECT_TRUE(same_bytes(two.bytes, reference.bytes));
  EXPECT_TRUE(contains(two.bytes, "two.cu"));
}

TEST_F(AutoPch, SymbolsKeepThePlainOrder) {
  // With NVRTC's default --instantiate-templates-in-pch=true, a compile from an image orders
  // libcu++'s template symbols differently (measured): cucore turns it off.
  fixture f;
  write_text(f.inc / "span.cuh",
             "#pragma once\n#include <cuda/std/complex>\n#include <cuda/std/span>\n"
             "namespace { __device__ int hidden_counter; }\n");
  const std::string e =
      "#include \"span.cuh\"\nextern \"C\" __global__ void ke(int* o) {\n"
      "  atomicAdd(&hidden_counter, 1); cuda::std::span<int> s(o, 4); o[0] = s.size(); }\n";
  const std::string g =
      "#include \"span.cuh\"\nextern \"C\" __global__ void kf(int* o) {\n"
      "  atomicAdd(&hidden_counter, 3); cuda::std::span<int> s(o, 4); o[1] = s.size(); }\n";
  const auto o = f.options();
  make_image(e, o);
  const compiled reference = plain(g, o);
  const compiled used = compile(g, o);
  EXPECT_EQ(used.status, auto_pch_status::used);
  EXPECT_TRUE(same_bytes(used.bytes, reference.bytes));
}

TEST_F(AutoPch, APrefixWhoseHeadersWarnIsNotPrecompiled) {
  // A compile from an image does not repeat the diagnostics of the headers it holds.
  fixture f;
  write_text(f.inc / "value.cuh",
             "#pragma once\n#include <cuda/std/cstdint>\n#include <cuda/std/limits>\n"
             "__device__ inline int value() { int unused_local; return 5; }\n");
  const auto o = f.options();
  const compiled reference = plain(kernel("kb"), o);
  ASSERT_TRUE(contains(reference.log, "unused_local")) << reference.log;
  compile(kernel("ka"), o);
  const compiled made = compile(kernel("ka"), o);
  EXPECT_EQ(made.status, auto_pch_status::unusable);
  const compiled later = compile(kernel("kb"), o);
  EXPECT_EQ(later.status, auto_pch_status::unusable);
  EXPECT_EQ(later.log, reference.log);
  EXPECT_TRUE(same_bytes(later.bytes, reference.bytes));
  EXPECT_EQ(detail::auto_pch_state().images, 0u);
}

TEST_F(AutoPch, NoImageForCodeWithoutLeadingIncludesOrWithTheCallersPchOptions) {
  fixture f;
  write_text(f.inc / "value.cuh", header_with(1));
  auto o = f.options();
  const std::string late =
      "__device__ int x;\n#include \"value.cuh\"\n"
      "extern \"C\" __global__ void k(int* p) { *p = value() + x; }\n";
  EXPECT_EQ(compile(late, o).status, auto_pch_status::no_prefix);
  EXPECT_EQ(compile(late, o).status, auto_pch_status::no_prefix);
  o.auto_pch = false;
  EXPECT_EQ(compile(kernel("ka"), o).status, auto_pch_status::off);
  EXPECT_EQ(compile(kernel("ka"), o).status, auto_pch_status::off);
  o.auto_pch.reset();
  o.instantiate_templates_in_pch = true;
  EXPECT_EQ(compile(kernel("ka"), o).status, auto_pch_status::off);
  o.instantiate_templates_in_pch.reset();
  o.pch = true;
  o.pch_dir = (f.dir / "mine").string();
  fs::create_directories(f.dir / "mine");
  EXPECT_EQ(compile(kernel("ka"), o).status, auto_pch_status::off);
  EXPECT_EQ(detail::auto_pch_state().images, 0u);
}

TEST_F(AutoPch, CodeThatDoesNotCompileKeepsNoImageAndIsCountedAgain) {
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const auto o = f.options();
  const std::string bad =
      "#include \"value.cuh\"\nextern \"C\" __global__ void k(int* p) { *p = "
      "undefined_thing; }\n";
  auto failing = [&](program_options options) {
    program p(bad, source_type::cxx, options);
    try {
      p.compile(code_type::cubin);
    } catch (const compile_error& e) {
      return std::make_pair(p.last_auto_pch(), std::string(e.log()));
    }
    ADD_FAILURE() << "compiled";
    return std::make_pair(p.last_auto_pch(), std::string());
  };
  auto off = o;
  off.auto_pch = false;
  const auto reference = failing(off);
  const auto first = failing(o);
  EXPECT_EQ(first.first, auto_pch_status::first_seen);
  const auto second = failing(o);  // would make the image: the error, and no image
  EXPECT_EQ(second.first, auto_pch_status::discarded);
  EXPECT_EQ(second.second, reference.second) << "the same error log";
  EXPECT_EQ(detail::auto_pch_state().images, 0u);
  // Counted again from none: a failing edit-compile loop makes no image each time.
  EXPECT_EQ(failing(o).first, auto_pch_status::first_seen);
  EXPECT_EQ(compile(kernel("ka"), o).status, auto_pch_status::created);
}

// ---- bad input ------------------------------------------------------------------------------

fs::path the_image() {
  const fs::path root = detail::auto_pch_state().root;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().extension() == ".pch") return e.path();
  }
  return {};
}

TEST_F(AutoPch, ATruncatedImageIsNotUsedAndTheCompileReadsTheHeaders) {
  // NVRTC maps the file: a truncated one kills the process with SIGBUS (measured).
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const auto o = f.options();
  make_image(kernel("ka"), o);
  const fs::path image = the_image();
  ASSERT_FALSE(image.empty());
  fs::resize_file(image, fs::file_size(image) / 2);
  std::vector<std::string> said;
  std::mutex m;
  const auto old = set_log_handler([&](log_level level, std::string_view text) {
    std::lock_guard lock(m);
    if (level == log_level::debug) said.emplace_back(text);
  });
  const compiled after = compile(kernel("kb"), o);
  set_log_handler(old);
  EXPECT_EQ(after.status, auto_pch_status::discarded);
  EXPECT_TRUE(same_bytes(after.bytes, plain(kernel("kb"), o).bytes));
  bool told = false;
  for (const auto& s : said) told = told || contains(s, "changed on disk");
  EXPECT_TRUE(told) << "a debug message says why";
  EXPECT_EQ(compile(kernel("kb"), o).status, auto_pch_status::created) << "made again";
}

TEST_F(AutoPch, AnImageRewrittenInPlaceOrFromAnotherProcessIsNotUsed) {
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const auto o = f.options();
  make_image(kernel("ka"), o);
  fs::path image = the_image();
  ASSERT_FALSE(image.empty());
  {  // same size, a byte in the middle flipped
    std::fstream io(image, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(fs::file_size(image) / 2));
    io.put('\x5a');
  }
  const compiled damaged = compile(kernel("kb"), o);
  EXPECT_EQ(damaged.status, auto_pch_status::discarded);
  EXPECT_TRUE(same_bytes(damaged.bytes, plain(kernel("kb"), o).bytes));

  // An image another process made of the same prefix (another NVRTC heap: NVRTC refuses it, or
  // worse): put in place of this process's own.
  ASSERT_EQ(compile(kernel("ka"), o).status, auto_pch_status::created);
  image = the_image();
  const fs::path theirs = f.dir / "theirs";
  ASSERT_EQ(testing::run_in_child([&]() -> std::string {
              clear_auto_pch();
              compile(kernel("ka"), o);
              if (compile(kernel("ka"), o).status != auto_pch_status::created) return "no image";
              fs::copy_file(the_image(), theirs);
              fs::remove_all(detail::auto_pch_state().root);  // _exit skips the removal at exit
              return "";
            }),
            "");
  fs::rename(theirs, image);
  const compiled planted = compile(kernel("kb"), o);
  EXPECT_EQ(planted.status, auto_pch_status::discarded);
  EXPECT_TRUE(same_bytes(planted.bytes, plain(kernel("kb"), o).bytes));
}

TEST_F(AutoPch, AHeapTooSmallIsGrownAndTheCompileIsRight) {
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const auto o = f.options();
  const std::size_t original = nvrtc_pch_heap_size();
  set_nvrtc_pch_heap_size(1 << 16);
  compile(kernel("ka"), o);
  const compiled small = compile(kernel("ka"), o);
  EXPECT_EQ(small.status, auto_pch_status::discarded);
  EXPECT_TRUE(same_bytes(small.bytes, plain(kernel("ka"), o).bytes));
  EXPECT_GT(nvrtc_pch_heap_size(), std::size_t{1 << 16});
  EXPECT_EQ(compile(kernel("ka"), o).status, auto_pch_status::created);
  EXPECT_EQ(compile(kernel("kb"), o).status, auto_pch_status::used);
  set_nvrtc_pch_heap_size(original);
  EXPECT_EQ(detail::auto_pch_state().images, 0u) << "a resize leaves no image NVRTC could use";
  EXPECT_EQ(compile(kernel("kb"), o).status, auto_pch_status::created);
}

TEST_F(AutoPch, AHeapResizedBehindCucoresBackLeavesTheOutputAndLogPlain) {
  // Another caller in the process resizes NVRTC's PCH heap directly: every image is then of the
  // wrong heap (NVRTC warns #20282 and makes another). The compile's output and log stay plain.
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const auto o = f.options();
  make_image(kernel("ka"), o);
  void* nvrtc = ::dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(nvrtc, nullptr) << "cucore loaded NVRTC";
  using get_fn = int (*)(std::size_t*);
  using set_fn = int (*)(std::size_t);
  const auto get = reinterpret_cast<get_fn>(::dlsym(nvrtc, "nvrtcGetPCHHeapSize"));
  const auto set = reinterpret_cast<set_fn>(::dlsym(nvrtc, "nvrtcSetPCHHeapSize"));
  ASSERT_TRUE(get != nullptr && set != nullptr);
  std::size_t size = 0;
  ASSERT_EQ(get(&size), 0);
  ASSERT_EQ(set(size + (64 << 20)), 0);  // a new heap, elsewhere
  const compiled reference = plain(kernel("kb"), o);
  std::string said;
  std::mutex m;
  const auto old = set_log_handler([&](log_level level, std::string_view text) {
    std::lock_guard lock(m);
    if (level == log_level::debug) said += std::string(text) + "\n";
  });
  const compiled after = compile(kernel("kb"), o);
  set_log_handler(old);
  EXPECT_EQ(after.status, auto_pch_status::discarded);
  EXPECT_TRUE(same_bytes(after.bytes, reference.bytes));
  EXPECT_EQ(after.log, reference.log);
  EXPECT_TRUE(contains(said, "automatic PCH: ")) << said;

  // With the caller's pch_verbose=true NVRTC says why it did not use the image: the log is not
  // the plain compile's, so the compile runs again without PCH.
  auto verbose = o;
  verbose.pch_verbose = true;
  make_image(kernel("ka"), verbose);
  ASSERT_EQ(set(size + (128 << 20)), 0);
  const compiled verbose_reference = plain(kernel("kb"), verbose);
  said.clear();
  set_log_handler([&](log_level level, std::string_view text) {
    std::lock_guard lock(m);
    if (level == log_level::debug) said += std::string(text) + "\n";
  });
  const compiled again = compile(kernel("kb"), verbose);
  set_log_handler(old);
  EXPECT_EQ(again.status, auto_pch_status::discarded);
  EXPECT_TRUE(same_bytes(again.bytes, verbose_reference.bytes));
  EXPECT_EQ(again.log, verbose_reference.log);
  EXPECT_TRUE(contains(said, "speaks of precompiled headers")) << said;
  EXPECT_EQ(compile(kernel("kb"), verbose).status, auto_pch_status::unusable);
  set(size);
  ::dlclose(nvrtc);
}

TEST_F(AutoPch, PchModeFailingForLackOfRoomCompilesAgainWithoutIt) {
  // NVRTC keeps its PCH-mode memory in a file under TMPDIR; when that file cannot grow the
  // compile fails ("unable to obtain mapped memory") where a plain one succeeds. In a child with a
  // file size limit: the compile runs again plain, and automatic PCH turns off for the process.
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const auto o = f.options();
  const compiled reference = plain(kernel("ka"), o);
  EXPECT_EQ(testing::run_in_child([&]() -> std::string {
              clear_auto_pch();
              std::signal(SIGXFSZ, SIG_IGN);
              const rlimit limit{1 << 20, 1 << 20};
              ::setrlimit(RLIMIT_FSIZE, &limit);
              compile(kernel("ka"), o);
              const compiled second = compile(kernel("ka"), o);
              const compiled third = compile(kernel("ka"), o);
              fs::remove_all(detail::auto_pch_state().root);
              if (second.status != auto_pch_status::discarded) {
                return "status " + std::string(to_string(second.status)) + ": " + second.log;
              }
              if (second.bytes != reference.bytes) return "bytes differ";
              if (third.status != auto_pch_status::off) return "not turned off";
              return "";
            }),
            "");
}

// ---- the PCH heap in a fresh process --------------------------------------------------------

constexpr const char* kHeapChildEnv = "CUCORE_TEST_PCH_HEAP_CHILD";

// Runs only in the fresh processes TheFirstHeapFitsACutePrefixUnlessTheUserChoseOne starts: the
// heap's size before and after this process's first image ("set" first sets one through cucore).
TEST(AutoPchHeapChild, ReportsTheHeapAroundTheFirstImage) {
  const char* mode = std::getenv(kHeapChildEnv);
  if (mode == nullptr) GTEST_SKIP() << "helper of AutoPch.TheFirstHeapFitsACutePrefix...";
  if (std::strcmp(mode, "set") == 0) set_nvrtc_pch_heap_size(std::size_t{320} << 20);
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const std::size_t before = nvrtc_pch_heap_size();
  make_image(kernel("ka"), f.options());
  const compiled used = compile(kernel("kb"), f.options());
  EXPECT_EQ(used.status, auto_pch_status::used);
  EXPECT_TRUE(same_bytes(used.bytes, plain(kernel("kb"), f.options()).bytes));
  std::cout << "heap " << before << " " << nvrtc_pch_heap_size() << "\n";
  clear_auto_pch();
}

// This test binary again, in a fresh process, filtered to the child test: its heap sizes.
std::string heap_sizes_in_a_fresh_process(const std::string& mode, const char* nvrtc_heap_size) {
  temp_dir dir;
  const fs::path out = dir / "out.txt";
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=AutoPchHeapChild.*";
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with("NVRTC_PCH_HEAP_SIZE=") &&
        !std::string_view(*e).starts_with(kHeapChildEnv))
      env.emplace_back(*e);
  }
  env.push_back(std::string(kHeapChildEnv) + "=" + mode);
  if (nvrtc_heap_size != nullptr)
    env.push_back(std::string("NVRTC_PCH_HEAP_SIZE=") + nvrtc_heap_size);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<char*> argv = {exe.data(), filter.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT, 0600);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return "posix_spawn failed";
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return "the child failed:\n" + testing::read_text(out);
  const std::string said = testing::read_text(out);
  const auto at = said.find("heap ");
  if (at == std::string::npos) return "no report:\n" + said;
  return said.substr(at + 5, said.find('\n', at) - at - 5);
}

TEST_F(AutoPch, TheFirstHeapFitsACutePrefixUnlessTheUserChoseOne) {
  // NVRTC's default, 256 MiB, is too small for a CuTe prefix's image (273 MB): cucore makes it
  // 512 MiB before the process's first image.
  EXPECT_EQ(heap_sizes_in_a_fresh_process("default", nullptr), "268435456 536870912");
  // A size the user chose stays: NVRTC_PCH_HEAP_SIZE, or set_nvrtc_pch_heap_size.
  EXPECT_EQ(heap_sizes_in_a_fresh_process("default", "301989888"), "301989888 301989888");
  EXPECT_EQ(heap_sizes_in_a_fresh_process("set", nullptr), "335544320 335544320");
}

// ---- threads --------------------------------------------------------------------------------

TEST_F(AutoPch, ManyThreadsCompilingOnePrefixGetThePlainBytes) {
  fixture f;
  write_text(f.inc / "value.cuh", header_with(7));
  const auto o = f.options();
  constexpr int kThreads = 4;
  const int rounds = static_cast<int>(testing::scaled(4, 2));
  std::vector<std::string> reference;
  for (int t = 0; t < kThreads; ++t)
    reference.push_back(plain(kernel("k" + std::to_string(t)), o).bytes);
  std::vector<std::string> wrong(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        const compiled c = compile(kernel("k" + std::to_string(t)), o);
        if (c.bytes != reference[t])
          wrong[t] =
              "round " + std::to_string(r) + " (" + std::string(to_string(c.status)) + ") differs";
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], "") << "thread " << t;
  EXPECT_LE(detail::auto_pch_state().images, 1u);
}

}  // namespace
}  // namespace cucore
