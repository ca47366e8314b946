// The one table of NVRTC's options (src/program/nvrtc_option_table.hpp) and the drop-in's parser of
// raw NVRTC option arrays, which reads through it. No compiles: the parser's decisions only (the
// drop-in harness, tests/dropin, runs them against the real library).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "dropin/nvrtc_options.hpp"
#include "program/nvrtc_option_table.hpp"

namespace cucore {
namespace {

dropin::parsed_nvrtc_options parse(const std::vector<std::string>& options) {
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  return dropin::parse_nvrtc_options(static_cast<int>(argv.size()), argv.data());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(NvrtcOptionTable, EverySpellingNamesOneOption) {
  std::set<std::string> seen;
  for (const auto& o : detail::nvrtc_options()) {
    std::string names(o.names);
    std::size_t at = 0;
    while (at <= names.size()) {
      const auto space = names.find(' ', at);
      const std::string name = names.substr(at, space - at);
      EXPECT_FALSE(name.empty()) << o.names;
      EXPECT_EQ(name.find('_'), std::string::npos) << name << ": spelled with '-'";
      EXPECT_TRUE(seen.insert(name).second) << name << " is in the table twice";
      if (space == std::string::npos) break;
      at = space + 1;
    }
    EXPECT_EQ(o.field.empty(), o.cli.empty()) << o.names;
  }
  // Every spelling of one option: one or two dashes, '_' for '-', short alias, attached value.
  for (const char* e : {"-arch=sm_90", "--arch=sm_90", "--gpu-architecture=sm_90",
                        "--gpu_architecture=sm_90", "-arch"}) {
    const auto* o = detail::find_nvrtc_option(e);
    ASSERT_NE(o, nullptr) << e;
    EXPECT_EQ(o->canonical, "arch") << e;
  }
  EXPECT_EQ(detail::find_nvrtc_option("-DX=1")->canonical, "D");
  EXPECT_EQ(detail::find_nvrtc_option("-I/dir")->canonical, "I");
  EXPECT_EQ(detail::find_nvrtc_option("--frobnicate"), nullptr);
  EXPECT_EQ(detail::find_nvrtc_option("--Idir"), nullptr) << "attached values take one dash";
  EXPECT_EQ(detail::find_nvrtc_option("value"), nullptr);
}

TEST(NvrtcOptionTable, ListsSplitIntoOptionsWithTheirValues) {
  const std::vector<std::string> list = {"-jtd",   "50", "--ftz=true", "-Xnvvm",
                                         "-opt=0", "-G", "-DX=1",      "stray"};
  const auto parsed = detail::parse_nvrtc_option_list(list);
  ASSERT_EQ(parsed.size(), 6u);
  EXPECT_EQ(parsed[0].value, "50");
  EXPECT_TRUE(parsed[0].separate_value);
  EXPECT_EQ(parsed[1].value, "true");
  EXPECT_EQ(parsed[2].value, "-opt=0") << "-X options take options as their values";
  EXPECT_FALSE(parsed[3].has_value);
  EXPECT_EQ(parsed[4].value, "X=1");
  EXPECT_EQ(parsed[5].option, nullptr) << "a value without its option is no option";
}

// Each reproduction: a relative --use-bundled-headers=bh used to pass the drop-in's guess (no '/',
// no "include" or "path" in it) and hit stale; an unknown option was kept verbatim.
TEST(DropinNvrtcOptions, WhatTheTableDoesNotCoverBypasses) {
  for (const auto& [options, why] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"-arch=sm_90", "--use-bundled-headers=bh"}, "bundled headers"},
           {{"-use_bundled_headers=bh"}, "bundled headers"},
           {{"--use-bundled-headers", "bh"}, "bundled headers"},
           {{"--frobnicate"}, "is not an NVRTC option cucore knows"},
           {{"--frobnicate=3"}, "is not an NVRTC option cucore knows"},
           {{"--no-lineinfo-inlined-at"}, "is not an NVRTC option cucore knows"},
           {{"-isystem=/usr/include"}, "is not an NVRTC option cucore knows"},
           {{"-Xcudafe=--diag_suppress=177"}, "a tool inside NVRTC"},
           {{"--time=t.csv"}, "an effect besides"},
           {{"--fdevice-time-trace=t.json"}, "an effect besides"},
           {{"--create-pch=x.pch"}, "an effect besides"},
           {{"-jtd", "50"}, "apart from its option"}}) {
    const auto parsed = parse(options);
    EXPECT_TRUE(contains(parsed.bypass, why)) << options.back() << ": " << parsed.bypass;
    EXPECT_FALSE(parsed.bypass_needs_digest) << options.back();
  }
  const auto pch = parse({"--pch"});
  EXPECT_TRUE(contains(pch.bypass, "read files the key cannot see")) << pch.bypass;
  EXPECT_TRUE(pch.bypass_needs_digest);
}

// Tile code is cached since the drop-in records the Tile IR with the other outputs (its key marks
// it, as the library's does): every spelling is keyed, none bypasses.
TEST(DropinNvrtcOptions, TileOptionsAreKeyedNotBypassed) {
  for (const char* option : {"-tile-only", "--tile-only", "-enable-tile", "--enable-tile",
                             "-simt-only", "-default-tile"}) {
    const auto parsed = parse({"-arch=sm_100", "-std=c++20", option});
    EXPECT_TRUE(parsed.bypass.empty()) << option << ": " << parsed.bypass;
  }
}

TEST(DropinNvrtcOptions, KnownOptionsAreKeyedInOneSpelling) {
  const auto parsed =
      parse({"--gpu-architecture=sm_90", "--jump-table-density=5", "--include-path=inc", "-Iabs",
             "--use_fast_math", "-std=c++17", "--pre-include=pre.h", "-DN=2",
             "--modify-stack-limit=false", "--optix-ir", "-err-no"});
  ASSERT_EQ(parsed.bypass, "");
  EXPECT_EQ(parsed.canonical,
            (std::vector<std::string>{"-arch=sm_90", "-jtd=5", "-Iinc", "-Iabs", "-use-fast-math",
                                      "-std=c++17", "-include=pre.h", "-DN=2",
                                      "-modify-stack-limit=false", "-optix-ir", "-err-no"}));
  EXPECT_EQ(parsed.fields.arch, "sm_90");
  EXPECT_EQ(parsed.fields.include_path, (std::vector<std::string>{"inc", "abs"}));
  EXPECT_EQ(parsed.fields.pre_include, (std::vector<std::string>{"pre.h"}));
  ASSERT_EQ(parsed.fields.define_macro.size(), 1u);
  EXPECT_EQ(parsed.fields.define_macro[0].name, "N");
}

TEST(NvrtcOptionTable, AnEmptyOutputNamesTheOptionThatCausedIt) {
  const std::vector<std::string> tile = {"-arch=sm_100", "-tile-only"};
  EXPECT_EQ(detail::empty_output_cause(tile, "ptx"),
            "\"-tile-only\" compiled only Tile code, so NVRTC produced no ptx: request the Tile "
            "IR or drop -tile-only");
  const std::vector<std::string> lto = {"-arch=sm_90", "--dlink-time-opt"};
  EXPECT_TRUE(contains(detail::empty_output_cause(lto, "ptx"), "request the ltoir target"));
  EXPECT_EQ(detail::empty_output_cause(lto, "ltoir"), "");
  const std::vector<std::string> plain = {"-arch=sm_90"};
  EXPECT_EQ(detail::empty_output_cause(plain, "cubin"), "");
  // The tile_ir target: which option kept NVRTC from making Tile IR.
  EXPECT_TRUE(contains(detail::empty_output_cause(plain, "tile_ir"), "Tile code is not enabled"));
  const std::vector<std::string> simt = {"-arch=sm_90", "--enable-tile", "--simt-only"};
  EXPECT_TRUE(contains(detail::empty_output_cause(simt, "tile_ir"),
                       "\"--simt-only\" generated no Tile code"));
}

// Which option lists make NVRTC generate Tile code (whose output, the Tile IR, compile() then
// fetches and the key marks): -enable-tile or -tile-only in any spelling, unless -simt-only.
TEST(NvrtcOptionTable, TileCodeIsEnabledOrTileOnlyWithoutSimtOnly) {
  using list = std::vector<std::string>;
  EXPECT_TRUE(detail::compiles_tile_code(list{"-arch=sm_100", "--enable-tile"}));
  EXPECT_TRUE(detail::compiles_tile_code(list{"-enable-tile"}));
  EXPECT_TRUE(detail::compiles_tile_code(list{"-tile-only"}));
  EXPECT_TRUE(detail::compiles_tile_code(list{"--tile-only", "-default-tile"}));
  EXPECT_FALSE(detail::compiles_tile_code(list{"--enable-tile", "--simt-only"}));
  EXPECT_FALSE(detail::compiles_tile_code(list{"-default-tile"}));
  EXPECT_FALSE(detail::compiles_tile_code(list{"-arch=sm_100"}));
  EXPECT_FALSE(detail::compiles_tile_code(list{"-DENABLE_TILE", "--enable-tiles"}));
}

// NVRTC 13.1+'s options: in the table (keyed, not bypassed), each covered by its field.
TEST(NvrtcOptionTable, Nvrtc13OptionsAreKnownAndCoveredByTheirFields) {
  for (const auto& [element, field] : std::vector<std::pair<std::string, std::string>>{
           {"--warning-as-error=all-warnings", "warning_as_error"},
           {"-Werror=reorder", "warning_as_error"},
           {"--Wreorder", "wreorder"},
           {"-enable-tile", "enable_tile"},
           {"-tile-only", "tile_only"},
           {"-simt-only", "simt_only"},
           {"-default-tile", "default_tile"},
           {"-diagnose-implicit-tile-var", "diagnose_implicit_tile_var"}}) {
    const auto* option = detail::find_nvrtc_option(element);
    ASSERT_NE(option, nullptr) << element;
    EXPECT_EQ(option->field, field) << element;
    EXPECT_EQ(detail::nvrtc_options_uncacheable(std::vector<std::string>{element}), "") << element;
  }
  for (const std::string element : {"-Wconversion", "-fmax-errors=3"}) {
    const auto* option = detail::find_nvrtc_option(element);
    ASSERT_NE(option, nullptr) << element;
    EXPECT_EQ(option->use, detail::nvrtc_option_use::keyed) << element;
    EXPECT_EQ(option->field, "") << element;
  }
}

// The drop-in's -Xptxas=VALUE (and --ptxas-options=VALUE) reach the key as ptxas_options, whose
// check bypasses those that name files (issue 39): the option array alone cannot tell.
TEST(DropinNvrtcOptions, PtxasOptionsReachTheKeysFileCheck) {
  const auto parsed = parse({"-arch=sm_90", "-Xptxas=-optf=opts.txt", "--ptxas-options=-v",
                             "-Xptxas=--options-file=rel/opts.txt"});
  ASSERT_EQ(parsed.bypass, "");
  EXPECT_EQ(parsed.fields.ptxas_options,
            (std::vector<std::string>{"-optf=opts.txt", "-v", "--options-file=rel/opts.txt"}));
  EXPECT_TRUE(
      contains(detail::ptxas_arguments_name_files(parsed.fields.ptxas_options), "opts.txt"));
  const auto plain = parse({"-arch=sm_90", "-Xptxas=-v", "--ptxas-options=--maxrregcount=32"});
  EXPECT_EQ(detail::ptxas_arguments_name_files(plain.fields.ptxas_options), "");
  // A bare -Xptxas takes the next element, which the drop-in does not follow: it bypasses.
  EXPECT_FALSE(parse({"-arch=sm_90", "-Xptxas", "-optf", "-Xptxas", "opts.txt"}).bypass.empty());
}

}  // namespace
}  // namespace cucore
