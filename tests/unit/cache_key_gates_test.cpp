// make_program_cache_key's gates: options with side effects, extra_nvrtc_options, precompiled
// headers, included files the key tracks or cannot see, NVVM and PTX refusals, the driver linker,
// and ptxas options that name files (a bypass).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "cache_key_test_support.hpp"
#include "cucore/cache/statistics.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace cucore::testing;  // NOLINT: the key tests' fixtures

// ---------------------------------------------------------------------------------------------
// Gates

// Named settings of program options, each tried on its own.
using option_settings = std::vector<std::pair<std::string, std::function<void(program_options&)>>>;

// Calls `check` with each setting's name and base(type) with that setting made (traced by name).
void for_each_setting(
    const option_settings& settings, source_type type,
    const std::function<void(const std::string&, program_cache_key_inputs&)>& check) {
  for (const auto& setting : settings) {
    SCOPED_TRACE(setting.first);
    auto in = base(type);
    setting.second(in.options);
    check(setting.first, in);
  }
}

// The message of the extra_digest_required that keying `in` throws; none (a failure) if it keys.
std::optional<std::string> digest_demand(const program_cache_key_inputs& in) {
  try {
    (void)key(in);
  } catch (const extra_digest_required& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted without extra_digest";
  return std::nullopt;
}

TEST(MakeProgramCacheKey, SideEffectOptionsRefusedForCxxEvenWithDigest) {
  const option_settings settings = {
      {"create_pch", [](program_options& o) { o.create_pch = "x.pch"; }},
      {"time", [](program_options& o) { o.time = "timing.csv"; }},
      {"fdevice_time_trace", [](program_options& o) { o.fdevice_time_trace = "trace.json"; }},
  };
  for_each_setting(settings, source_type::cxx,
                   [](const std::string& name, program_cache_key_inputs& in) {
                     for (bool digest : {false, true}) {
                       if (digest) in.extra_digest = "fingerprint";
                       auto msg = refusal(in);
                       EXPECT_TRUE(contains(msg, name)) << msg;
                       EXPECT_TRUE(contains(msg, "side effect")) << msg;
                       EXPECT_TRUE(contains(msg, "without the cache")) << msg;
                     }
                   });
}

// extra_nvrtc_options enter the key as the last option fields, verbatim and in order; those that
// hand options to a tool inside NVRTC make it refuse, whatever the extra_digest.
TEST(MakeProgramCacheKey, ExtraNvrtcOptionsAreHashedVerbatimInOrder) {
  auto with = [](std::vector<std::string> extra) {
    auto in = base();
    in.options.extra_nvrtc_options = std::move(extra);
    return in;
  };
  const auto k = key(with({"-jtd=50", "--modify-stack-limit=false"}));
  const auto options = payloads(k, "option");
  ASSERT_GE(options.size(), 3u);
  EXPECT_EQ(options[options.size() - 2], "-jtd=50");
  EXPECT_EQ(options.back(), "--modify-stack-limit=false");
  EXPECT_NE(k, key(with({"--modify-stack-limit=false", "-jtd=50"}))) << "order matters";
  EXPECT_NE(k, key(with({"-jtd=50"})));
  EXPECT_NE(key(with({"-jtd", "50"})), key(with({"-jtd=50"}))) << "hashed as given";
  EXPECT_NE(key(with({"-jtd=50"})), key(base()));
  EXPECT_EQ(key(with({})), key(base())) << "none: the key of options without the field";
  // A refused element refuses the key too.
  EXPECT_TRUE(contains(refusal(with({"-I/tmp"})), "program_options::include_path"));
}

// Keys `extra` as extra_nvrtc_options without, then with, an extra_digest: each is refused with
// invalid_argument, whose message `check` reads (extra_digest_required fails: `no_digest` says why
// a digest cannot do). `named` names the case in failures.
void expect_extra_options_refused(const std::vector<std::string>& extra, const std::string& named,
                                  std::string_view no_digest,
                                  const std::function<void(const std::string&)>& check) {
  for (bool digest : {false, true}) {
    SCOPED_TRACE(named + (digest ? " with a digest" : ""));
    auto in = base();
    in.options.extra_nvrtc_options = extra;
    if (digest) in.extra_digest = "fingerprint";
    try {
      (void)key(in);
      ADD_FAILURE() << "keyed";
    } catch (const extra_digest_required& e) {
      ADD_FAILURE() << no_digest << e.what();
    } catch (const invalid_argument& e) {
      check(e.what());
    }
  }
}

TEST(MakeProgramCacheKey, ExtraNvrtcOptionsForToolsInsideNvrtcAreRefusedEvenWithDigest) {
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"-Xcudafe", "--diag_suppress=177"}, {"-jtd=50", "-Xnvvm=-opt=3"}, {"--Xcudafe=-x"}}) {
    expect_extra_options_refused(
        extra, extra.back(),
        "an extra_digest cannot cover what these may write: ", [&](const std::string& msg) {
          EXPECT_TRUE(contains(msg, "extra_nvrtc_options")) << msg;
          EXPECT_TRUE(contains(msg, "\"" + extra.back() + "\"")) << msg;
          EXPECT_TRUE(contains(msg, "without the cache")) << msg;
        });
  }
}

// The table of NVRTC's options decides, not an option's name: one it does not know, one with a side
// effect, and --use-bundled-headers (NVRTC installs headers into DIR and reads them there; the key
// does not walk DIR) refuse the key, whatever the extra_digest; a known one is keyed.
TEST(MakeProgramCacheKey, ExtraNvrtcOptionsOutsideTheTableAreRefused) {
  for (const auto& [extra, why] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--no-lineinfo-inlined-at"}, "is not an NVRTC option cucore knows"},
           {{"-jtd=50", "--frobnicate=a/b"}, "is not an NVRTC option cucore knows"},
           {{"--use-bundled-headers=bh"}, "install its bundled headers"},
           {{"--use_bundled_headers", "bh"}, "install its bundled headers"},
           {{"-isystem=/usr/include"}, "is not an NVRTC option cucore knows"}}) {
    const std::string& expected = why;  // a lambda cannot capture a structured binding (clang 14)
    expect_extra_options_refused(
        extra, extra.front(),
        "an extra_digest does not say what the option does: ", [&](const std::string& msg) {
          EXPECT_TRUE(contains(msg, "extra_nvrtc_options \"")) << msg;
          EXPECT_TRUE(contains(msg, expected)) << msg;
          EXPECT_TRUE(contains(msg, "without the cache")) << msg;
        });
  }
  auto in = base();
  in.options.extra_nvrtc_options = {
      "--jump-table-density", "50", "--device-stack-protector=true", "-err-no", "-Wconversion",
      "-fmax-errors=3"};
  EXPECT_NO_THROW((void)key(in));
}

TEST(MakeProgramCacheKey, PrecompiledHeadersNeedExtraDigest) {
  const option_settings settings = {
      {"pch", [](program_options& o) { o.pch = true; }},
      {"use_pch", [](program_options& o) { o.use_pch = "x.pch"; }},
      {"pch_dir", [](program_options& o) { o.pch_dir = "/tmp/pch"; }},
  };
  for_each_setting(settings, source_type::cxx,
                   [](const std::string& name, program_cache_key_inputs& in) {
                     if (const auto msg = digest_demand(in)) {
                       EXPECT_TRUE(contains(*msg, name)) << *msg;
                       EXPECT_TRUE(contains(*msg, "extra_digest")) << *msg;
                       EXPECT_TRUE(contains(*msg, "without the cache")) << *msg;
                     }

                     in.extra_digest = "headers-v1";
                     const auto k1 = key(in);
                     in.extra_digest = "headers-v2";
                     EXPECT_NE(key(in), k1) << "different digests, different keys";
                   });
}

// include_path and pre_include used to need an extra_digest: the headers they reach are tracked.
TEST(MakeProgramCacheKey, IncludePathAndPreIncludeAreTracked) {
  temp_dir dir;
  auto in = base();
  in.options.include_path = {dir.path().string()};
  const auto k = key(in);
  EXPECT_NE(k, key(base()));
  EXPECT_FALSE(k.includes().tracked) << "code that includes nothing reads no header";
  EXPECT_EQ(payloads(k, "headers_count"), std::vector<std::string>{});

  in.options.pre_include = {"prelude.h"};
  const auto absent = key(in);
  EXPECT_TRUE(absent.includes().tracked);
  EXPECT_EQ(absent.includes().files, 0u);
  const auto absent_fields = payloads(absent, "header_absent");
  EXPECT_NE(std::find(absent_fields.begin(), absent_fields.end(),
                      (dir.path() / "prelude.h").string() + " (absent)"),
            absent_fields.end());

  testing::write_text(dir / "prelude.h", "#define PRELUDE 1\n");
  const auto present = key(in);
  EXPECT_NE(present, absent);
  EXPECT_EQ(present.includes().files, 1u);
  ASSERT_EQ(payloads(present, "header").size(), 1u);
  EXPECT_TRUE(payloads(present, "header")[0].starts_with((dir.path() / "prelude.h").string() +
                                                         " (18 bytes, sha256 "))
      << payloads(present, "header")[0];

  // With an extra_digest too: still tracked, the digest added after the headers.
  in.extra_digest = "more";
  const auto both = key(in);
  EXPECT_EQ(both.includes().files, 1u);
  EXPECT_EQ(labels(both).back(), "extra_digest");
  EXPECT_NE(both, present);
}

TEST(MakeProgramCacheKey, EmptyExternalContentNeedsNoDigest) {
  auto in = base();
  in.options.include_path = {};
  in.options.pre_include = {};
  in.options.headers = {};
  in.options.pch = false;
  EXPECT_EQ(key(in), key(base()));
}

// A program name with a directory (as the CLI gives: the source file's path) used to need an
// extra_digest: NVRTC searches that directory for quoted includes, which the key now tracks.
TEST(MakeProgramCacheKey, NameWithDirectoryIsAccepted) {
  std::set<program_cache_key> keys;
  for (const char* name : {"kernels/foo.cu", "/abs/foo.cu", "../p/foo.cu", "a\\b.cu", "foo.cu"}) {
    SCOPED_TRACE(name);
    auto in = base();
    in.options.name = name;
    const auto plain = key(in);
    EXPECT_FALSE(plain.includes().tracked) << "code that includes nothing reads no header";
    in.options.no_source_include = true;
    const auto no_source = key(in);
    EXPECT_NE(plain, no_source);
    EXPECT_TRUE(keys.insert(plain).second);
  }
  // Module names of ptx and nvvm programs are only names.
  for (auto type : {source_type::ptx, source_type::nvvm}) {
    auto other = base(type);
    other.options.name = "kernels/foo.ptx";
    EXPECT_NO_THROW((void)key(other)) << type_name(type);
  }
}

std::vector<key_field> header_fields(const program_cache_key& k) {
  std::vector<key_field> out;
  for (const auto& f : k.explain()) {
    if (f.label == "headers_count" || f.label == "header" || f.label == "header_absent" ||
        f.label == "header_in_memory" || f.label.starts_with("memory_header")) {
      out.push_back(f);
    }
  }
  return out;
}

TEST(MakeProgramCacheKey, NameDirectoryIsSearchedUnlessNoSourceInclude) {
  temp_dir dir;
  temp_dir inc;
  testing::write_text(dir / "h.cuh", "#error \"not this one\"\n");
  testing::write_text(inc / "h.cuh", "#define H 1\n");
  const std::string code = "#include \"h.cuh\"\n" + std::string(kCxx);
  auto in = base();
  in.code = code;
  in.options.name = (dir / "k.cu").string();
  in.options.include_path = {inc.path().string()};
  in.options.toolkit_include_path = false;
  const std::string beside = (dir / "h.cuh").string();

  // Searched: the header beside the name is the one found (the search stops there).
  const auto searched = key(in);
  auto fields = header_fields(searched);
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[0], (key_field{"headers_count", "1"}));
  EXPECT_EQ(fields[1].label, "header");
  EXPECT_TRUE(fields[1].payload.starts_with(beside + " (")) << fields[1].payload;

  // no_source_include: never looked at; the -I one is.
  in.options.no_source_include = true;
  const auto skipped = key(in);
  fields = header_fields(skipped);
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[0], (key_field{"headers_count", "1"}));
  EXPECT_EQ(fields[1].label, "header");
  EXPECT_TRUE(fields[1].payload.starts_with((inc / "h.cuh").string() + " (")) << fields[1].payload;
  for (const auto& f : skipped.explain()) {
    EXPECT_FALSE(contains(f.payload, beside)) << f.label << " " << f.payload;
  }
  // ...and editing it changes nothing.
  testing::write_text(dir / "h.cuh", "#error \"still not this one\"\n");
  EXPECT_EQ(key(in), skipped);
  in.options.no_source_include.reset();
  EXPECT_NE(key(in), searched) << "the header beside the name was edited";

  // Without the -I directory and with no_source_include, nothing is found: no candidate at all.
  in.options.include_path = {};
  in.options.no_source_include = true;
  const auto nothing = key(in);
  EXPECT_TRUE(nothing.includes().tracked);
  EXPECT_EQ(nothing.includes().files, 0u);
  EXPECT_EQ(nothing.includes().absent, 0u);
}

// Calls `check` with each of `codes` and base() whose code is it followed by kCxx (traced by it).
void for_each_code(
    const std::vector<std::string>& codes,
    const std::function<void(const std::string&, program_cache_key_inputs&)>& check) {
  for (const auto& code : codes) {
    SCOPED_TRACE(code);
    auto in = base();
    const std::string text = code + std::string(kCxx);
    in.code = text;
    check(code, in);
  }
}

TEST(MakeProgramCacheKey, CodeThatIncludesFilesIsTracked) {
  const std::vector<std::string> reaching = {
      "#include \"h.h\"\n",
      "  #  include \"h.h\"\n",
      "%:include \"h.h\"\n",
      "#include </abs/h.h>\n",
      "#inc\\\nlude \"h.h\"\n",
      "/**/ # /**/ include \"h.h\"\n",
      "#include /* multi\nline */ \"h.h\"\n",
      "#if __has_include(\"h.h\")\n#endif\n",
      "#if __has_include(</abs/h.h>)\n#endif\n",
      "#include_next \"h.h\"\n",
      "#embed \"data.bin\"\n",
      "#import \"h.h\"\n",
      "const char* s = R\"(/*)\";\n#include \"h.h\"\n// */\n",
      "const char* s = R\"x(\")x\";\n#include \"h.h\"\n",
      "int big = 1'000'000;\n#include \"h.h\"\n",
      "int c = '\"';\n#include \"h.h\"\n",
      "__global__ void k() {}\r\n#include \"h.h\"\r\n",
      "#define HEADER \"h.h\"\n#include HEADER\n",
      "#define HEADER <h.h>\n#include HEADER\n",
      "#define INNER \"h.h\"\n#define HEADER INNER\n#include HEADER\n",
      "#include <cuda/std/cstdint>\n",
      "#if __has_include(<cuda/std/cstdint>)\n#endif\n",
      "#ifdef __has_include\n#endif\n",
      "#if defined(__has_include)\n#endif\n",
      // __has_include behind a macro (as CCCL writes it): the calls name the headers.
      "#define HAS __has_include\n#if HAS(\"later.h\")\n#endif\n",
      "#define HAS_INCLUDE(_X) __has_include(_X)\n#if HAS_INCLUDE(<later.h>)\n#endif\n",
  };
  for_each_code(reaching, [](const std::string& code, program_cache_key_inputs& in) {
    try {
      const auto k = key(in);
      EXPECT_TRUE(k.includes().tracked);
      EXPECT_TRUE(k.includes().vouched.empty());
      EXPECT_EQ(payloads(k, "untracked_include"), std::vector<std::string>{});
      if (contains(code, "later.h")) {
        // Looked for in the toolkit's directories (absent there).
        const auto absent = payloads(k, "header_absent");
        EXPECT_TRUE(std::any_of(absent.begin(), absent.end(), [](const std::string& p) {
          return contains(p, "/later.h (absent)");
        })) << k.includes().absent;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  });

  // What the scan cannot see through, it refuses (and with an extra_digest, lists as vouched):
  // a macro defined nowhere, and names built from macros NVRTC predefines (values unknown here).
  const std::vector<std::string> unresolvable = {
      "#include HEADER\n",
      "#define STR2(x) #x\n#define STR(x) STR2(x)\n#include STR(__CUDACC_VER_MAJOR__.h)\n",
      "#define H(x) <x.h>\n#include H(__CUDACC_VER_MINOR__)\n",
  };
  for_each_code(unresolvable, [](const std::string&, program_cache_key_inputs& in) {
    if (const auto msg = digest_demand(in)) {
      EXPECT_TRUE(contains(*msg, "extra_digest")) << *msg;
    }
    in.extra_digest = "fingerprint";
    const auto k = key(in);
    EXPECT_TRUE(k.includes().tracked);
    EXPECT_FALSE(k.includes().vouched.empty());
    EXPECT_FALSE(payloads(k, "untracked_include").empty());
  });

  const std::vector<std::string> no_directive = {
      "// the code includes nothing\n",
      "int include = 1;\n",
      "const char* s = \"include\";\n",
  };
  for_each_code(no_directive, [](const std::string&, program_cache_key_inputs& in) {
    EXPECT_FALSE(key(in).includes().tracked);
  });

  // The message names the line.
  auto in = base();
  const std::string text = "// a\n// b\n#include MINE\n" + std::string(kCxx);
  in.code = text;
  auto msg = refusal(in);
  EXPECT_TRUE(contains(msg, ":3: #include MINE")) << msg;

  // Physical lines: a backslash-newline still counts as a line break in the message.
  const std::string spliced =
      "int a = \\\n  1;\r\n#define X \\\r\n 2\n#include MINE\n" + std::string(kCxx);
  in.code = spliced;
  msg = refusal(in);
  EXPECT_TRUE(contains(msg, ":5: #include MINE")) << msg;
}

TEST(MakeProgramCacheKey, DefinesThatMakeNvrtcReadHostHeadersNeedExtraDigest) {
  const option_settings settings = {
      {"__GNUC__",
       [](program_options& o) {
         o.define_macro = {macro{"__GNUC__", "12"}};
       }},
      {"__QNX__", [](program_options& o) { o.define_macro = {"__QNX__"}; }},
      {"__CUDACC_RTC__", [](program_options& o) { o.undefine_macro = {"__CUDACC_RTC__"}; }},
  };
  for_each_setting(settings, source_type::cxx,
                   [](const std::string& name, program_cache_key_inputs& in) {
                     if (const auto msg = digest_demand(in)) {
                       EXPECT_TRUE(contains(*msg, name)) << *msg;
                     }
                     in.extra_digest = "fingerprint";
                     EXPECT_FALSE(key(in).includes().vouched.empty());
                   });
}

TEST(ParseCodeType, IsCaseInsensitive) {
  for (const auto& [text, type] :
       std::vector<std::pair<std::string, code_type>>{{"CUBIN", code_type::cubin},
                                                      {"Ptx", code_type::ptx},
                                                      {"ptx", code_type::ptx},
                                                      {"LTOIR", code_type::ltoir},
                                                      {"FatBin", code_type::fatbin}}) {
    EXPECT_EQ(parse_code_type(text), type) << text;
  }
  for (const char* bad : {"CUBINX", ""}) {
    EXPECT_THROW(parse_code_type(bad), invalid_argument) << bad;
  }
}

// Keying `in` is refused with a message that contains each of `parts`.
void expect_refused_naming(const program_cache_key_inputs& in,
                           std::initializer_list<std::string_view> parts) {
  const auto msg = refusal(in);
  for (auto part : parts) EXPECT_TRUE(contains(msg, part)) << msg;
}

TEST(MakeProgramCacheKey, NvvmUseLibdeviceNeedsExtraDigest) {
  auto in = base(source_type::nvvm);
  in.options.use_libdevice = true;
  expect_refused_naming(in, {"use_libdevice", "extra_digest", "libdevice_path"});
  in.extra_digest = "libdevice";
  auto with = key(in);
  auto without = base(source_type::nvvm);
  without.extra_digest = "libdevice";
  EXPECT_NE(with, key(without));
  without.options.use_libdevice = false;
  EXPECT_EQ(key(without), key([] {
              auto b = base(source_type::nvvm);
              b.extra_digest = "libdevice";
              return b;
            }()));
}

TEST(MakeProgramCacheKey, UseLibdeviceRefusedOutsideNvvm) {
  for (auto type : {source_type::cxx, source_type::ptx}) {
    auto in = base(type);
    in.options.use_libdevice = true;
    in.extra_digest = "x";
    expect_refused_naming(in, {"use_libdevice"});
  }
}

TEST(MakeProgramCacheKey, ExtraSourcesRefusedOutsideNvvm) {
  for (auto type : {source_type::cxx, source_type::ptx}) {
    auto in = base(type);
    in.options.extra_sources = {{"m", "x"}};
    in.extra_digest = "x";
    expect_refused_naming(in, {"extra_sources", "only supported for nvvm", "cucore::linker"});
  }
}

TEST(MakeProgramCacheKey, PtxRefusesNvrtcOnlyOptionsClearly) {
  // Unlike cuda.core (which ignores them), a ptx program refuses options its linker cannot take.
  auto in = base(source_type::ptx);
  in.options.include_path = {"/inc"};
  in.options.std = "c++17";
  in.extra_digest = "x";
  expect_refused_naming(in, {"include_path", "std", "PTX"});
}

TEST(MakeProgramCacheKey, PtxTimeIsTheLinkersFlag) {
  auto in = base(source_type::ptx);
  in.options.time = "ignored.csv";
  auto k = key(in);
  EXPECT_NE(k, key(base(source_type::ptx)));
  auto opts = payloads(k, "option");
  EXPECT_NE(std::find(opts.begin(), opts.end(), "-time"), opts.end());
}

TEST(MakeProgramCacheKey, DriverLinkerCollapsesIgnoredFields) {
  const auto driver = fixed_probes::driver();
  const auto plain = key(base(source_type::ptx), driver);
  for (auto set : std::vector<std::function<void(program_options&)>>{
           [](program_options& o) { o.ftz = true; },
           [](program_options& o) { o.ftz = false; },
           [](program_options& o) { o.prec_div = true; },
           [](program_options& o) { o.prec_sqrt = false; },
           [](program_options& o) { o.fma = true; },
           [](program_options& o) {
             o.ftz = true;
             o.prec_div = false;
             o.prec_sqrt = true;
             o.fma = false;
           },
       }) {
    auto in = base(source_type::ptx);
    set(in.options);
    EXPECT_EQ(key(in, driver), plain);
    EXPECT_NE(key(in), key(base(source_type::ptx))) << "under nvJitLink they matter";
  }
  // Fields the driver honours still matter.
  auto in = base(source_type::ptx);
  in.options.max_register_count = 32;
  EXPECT_NE(key(in, driver), plain);
  in = base(source_type::ptx);
  in.options.debug = true;
  EXPECT_NE(key(in, driver), plain);
}

TEST(MakeProgramCacheKey, DriverLinkerRefusesWhatNeedsNvJitLink) {
  const auto driver = fixed_probes::driver();
  const option_settings settings = {
      {"time", [](program_options& o) { o.time = "t.csv"; }},
      {"ptxas_options", [](program_options& o) { o.ptxas_options = {"-v"}; }},
      {"split_compile", [](program_options& o) { o.split_compile = 0; }},
  };
  for_each_setting(
      settings, source_type::ptx, [&](const std::string& name, program_cache_key_inputs& in) {
        auto msg = refusal(in, driver);
        EXPECT_TRUE(contains(msg, name)) << msg;
        EXPECT_TRUE(contains(msg, "nvJitLink")) << msg;
        EXPECT_NO_THROW((void)key(in)) << "accepted under nvJitLink";
        // A failed linker probe skips the driver rules: the key is tainted already.
        fixed_probes failed = kProbes;
        failed.linker_result = {false, linker_backend::driver, "", "library_not_found"};
        EXPECT_NO_THROW((void)key(in, failed));
      });
  auto both = base(source_type::ptx);
  both.options.time = "t.csv";
  both.options.split_compile = 2;
  auto msg = refusal(both, driver);
  EXPECT_TRUE(contains(msg, "time")) << msg;
  EXPECT_TRUE(contains(msg, "split_compile")) << msg;
}

TEST(MakeProgramCacheKey, FailedLinkerProbeDoesNotCollapse) {
  fixed_probes failed = kProbes;
  failed.linker_result = {false, linker_backend::driver, "", "library_not_found"};
  auto in = base(source_type::ptx);
  in.options.ftz = true;
  EXPECT_NE(key(in, failed), key(base(source_type::ptx), failed));
}

// ---------------------------------------------------------------------------------------------
// ptxas options that name files (issue 39): ptxas reads or writes them, the key does not walk
// them, so every spelling bypasses (option_file); ptxas's ordinary options do not.

// Calls `check` with the key of base(type) given each of `lists` as its ptxas_options, for c++ and
// ptx programs.
void for_each_ptxas_options(const std::vector<std::vector<std::string>>& lists,
                            const std::function<void(const program_cache_key&)>& check) {
  for (const source_type type : {source_type::cxx, source_type::ptx}) {
    for (const auto& options : lists) {
      SCOPED_TRACE(std::string(type_name(type)) + ": " + options.front());
      auto in = base(type);
      in.options.ptxas_options = options;
      check(key(in));
    }
  }
}

TEST(MakeProgramCacheKey, PtxasOptionsNamingFilesBypass) {
  const std::vector<std::vector<std::string>> naming = {
      {"--options-file=opts.txt"},
      {"-optf=opts.txt"},
      {"-optf=/abs/opts.txt,other.txt"},
      {"--options-file", "opts.txt"},
      {"-optf", "../opts.txt"},
      {"-v", "-optf=opts.txt"},
      {"--maxrregcount=32", "--options-file=opts.txt"},
      {"--output-file=out.o"},
      {"-o=out.o"},
      {"-o", "out.o"},
      {"opts.txt"},                         // no option: ptxas reads it as a PTX input file
      {" -v"},                              // the same (ptxas: "Input file ' -v'")
      {"-O", "2"},                          // -O takes no separate value: "2" is an input file
      {"--compiler-stats-file=stats.txt"},  // hidden options of the built-in ptxas
      {"--apply-controls=c.txt"},
      {"-v,-optf=opts.txt"},  // one argument, as NVRTC passes it (ptxas fails it; still bypassed)
      {"-v -optf=opts.txt"},
      {"--help"},
      {"-ofoo.o"},
  };
  for_each_ptxas_options(naming, [](const program_cache_key& k) {
    ASSERT_TRUE(k.bypass().has_value());
    EXPECT_EQ(k.bypass()->reason, cache_skip_reason::option_file);
    EXPECT_TRUE(contains(k.bypass()->why, "ptxas_options")) << k.bypass()->why;
    EXPECT_TRUE(contains(k.bypass()->why, "without the cache")) << k.bypass()->why;
  });
  // The why names the option and the file.
  auto in = base();
  in.options.ptxas_options = {"-optf", "my_opts.txt"};
  const std::string why = key(in).bypass()->why;
  EXPECT_TRUE(contains(why, "\"-optf\"")) << why;
  EXPECT_TRUE(contains(why, "my_opts.txt")) << why;
  EXPECT_TRUE(contains(why, "--options-file")) << why;
  in.options.ptxas_options = {"--output-file=written.o"};
  const std::string writes = key(in).bypass()->why;
  EXPECT_TRUE(contains(writes, "written.o")) << writes;
  EXPECT_TRUE(contains(writes, "write")) << writes;
}

TEST(MakeProgramCacheKey, OrdinaryPtxasOptionsDoNotBypass) {
  const std::vector<std::vector<std::string>> ordinary = {
      {"-v"},
      {"--verbose"},
      {"--maxrregcount=32"},
      {"-maxrregcount=32"},
      {"--maxrregcount", "32"},
      {"-O3"},
      {"-O=3"},
      {"-O0"},
      {"--opt-level=2"},
      {"--opt-level", "2"},
      {"--warn-on-spills"},
      {"-warn-spills"},
      {"-v", "--warn-on-local-memory-usage", "-Werror"},
      {"-m64"},
      {"--fmad", "false"},
      {"--entry=k"},
      {"-e", "k"},
      {"--allow-expensive-optimizations=true"},
      {"-Ofc=max"},
      {"--device-debug"},
      {"-lineinfo"},
      {"--def-load-cache"},
  };
  for_each_ptxas_options(ordinary, [](const program_cache_key& k) {
    EXPECT_FALSE(k.bypass().has_value()) << k.bypass()->why;
  });
}

}  // namespace
}  // namespace cucore
