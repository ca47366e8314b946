// make_program_cache_key: what every program_options field does to each code type's key, from one
// table that a new field fails until it is added there.
#include "cucore/cache/key.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "cache_key_test_support.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/toolkit.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // cache_key_test_support.hpp and the shared test helpers

// ---------------------------------------------------------------------------------------------
// Every program_options field

// Counts an aggregate's fields (brace-initialisable with N converting placeholders): a new
// program_options field fails the table test below until it is added there.
struct any_field {
  template <class T>
  operator T() const {  // NOLINT: implicit on purpose; only used unevaluated
    std::abort();
  }
};
template <class T, std::size_t... I>
constexpr bool brace_constructible(std::index_sequence<I...>) {
  return requires {
    T{(static_cast<void>(I), any_field{})...};
  };
}
template <class T, std::size_t N = 0>
constexpr std::size_t aggregate_field_count() {
  if constexpr (brace_constructible<T>(std::make_index_sequence<N + 1>{})) {
    return aggregate_field_count<T, N + 1>();
  } else {
    return N;
  }
}

// What setting a field does to one code type's key.
enum class effect {
  refused,  // invalid_argument naming the field
  changes,  // both values change the key, and differ from each other
  truthy,   // true changes the key; false is the same as unset (the flag is only emitted when true)
  falsy,    // false changes the key; true is the same as unset (on by default)
  presence,     // both values change the key the same way (only presence matters)
  ignored,      // accepted, no effect on the output, no effect on the key
  side_effect,  // refused even with an extra_digest
};

struct field_case {
  std::string name;
  // Sets the field: variant 0 and variant 1 are two different values (for a bool: true, false).
  std::function<void(program_options&, int)> set;
  std::map<source_type, effect> effects;  // a type not listed: refused
  std::set<source_type> needs_digest;     // refused without extra_digest for these types
};

template <class T>
std::function<void(program_options&, int)> set_to(T program_options::*field, T a, T b) {
  return [=](program_options& o, int variant) { o.*field = variant == 0 ? a : b; };
}
std::function<void(program_options&, int)> set_bool(std::optional<bool> program_options::*field) {
  return [=](program_options& o, int variant) { o.*field = variant == 0; };
}

using S = source_type;
using E = effect;

std::vector<field_case> field_cases() {
  using strs = std::vector<std::string>;
  using opt_str = std::optional<std::string>;
  using opt_int = std::optional<int>;
  using ints = std::vector<int>;
  using po = program_options;
  return {
      {"name",
       set_to(&po::name, std::string("a"), std::string("b")),
       {{S::cxx, E::changes}, {S::ptx, E::changes}, {S::nvvm, E::changes}},
       {}},
      {"arch",
       set_to(&po::arch, opt_str("sm_80"), opt_str("sm_100")),
       {{S::cxx, E::changes}, {S::ptx, E::changes}, {S::nvvm, E::changes}},
       {}},
      {"relocatable_device_code",
       set_bool(&po::relocatable_device_code),
       {{S::cxx, E::changes}, {S::ptx, E::truthy}},  // ptx: nvJitLink -r
       {}},
      {"extensible_whole_program",
       set_bool(&po::extensible_whole_program),
       {{S::cxx, E::truthy}},
       {}},
      {"debug",
       set_bool(&po::debug),
       {{S::cxx, E::truthy}, {S::ptx, E::truthy}, {S::nvvm, E::truthy}},
       {}},
      {"lineinfo", set_bool(&po::lineinfo), {{S::cxx, E::truthy}, {S::ptx, E::truthy}}, {}},
      {"device_code_optimize",
       set_bool(&po::device_code_optimize),
       {{S::cxx, E::truthy}, {S::nvvm, E::changes}},
       {}},
      {"ptxas_options",
       set_to(&po::ptxas_options, strs{"-v"}, strs{"-O1"}),
       {{S::cxx, E::changes}, {S::ptx, E::changes}},
       {}},
      {"max_register_count",
       set_to(&po::max_register_count, opt_int(32), opt_int(64)),
       {{S::cxx, E::changes}, {S::ptx, E::changes}},
       {}},
      {"ftz",
       set_bool(&po::ftz),
       {{S::cxx, E::changes}, {S::ptx, E::changes}, {S::nvvm, E::changes}},
       {}},
      {"prec_sqrt",
       set_bool(&po::prec_sqrt),
       {{S::cxx, E::changes}, {S::ptx, E::changes}, {S::nvvm, E::changes}},
       {}},
      {"prec_div",
       set_bool(&po::prec_div),
       {{S::cxx, E::changes}, {S::ptx, E::changes}, {S::nvvm, E::changes}},
       {}},
      {"fma",
       set_bool(&po::fma),
       {{S::cxx, E::changes}, {S::ptx, E::changes}, {S::nvvm, E::changes}},
       {}},
      {"use_fast_math", set_bool(&po::use_fast_math), {{S::cxx, E::truthy}}, {}},
      {"extra_device_vectorization",
       set_bool(&po::extra_device_vectorization),
       {{S::cxx, E::truthy}},
       {}},
      {"link_time_optimization",
       set_bool(&po::link_time_optimization),
       {{S::cxx, E::truthy}, {S::ptx, E::truthy}},
       {}},
      {"gen_opt_lto", set_bool(&po::gen_opt_lto), {{S::cxx, E::truthy}}, {}},
      {"define_macro",
       set_to(&po::define_macro, std::vector<macro>{"A"}, std::vector<macro>{macro{"A", "1"}}),
       {{S::cxx, E::changes}},
       {}},
      {"undefine_macro",
       set_to(&po::undefine_macro, strs{"A"}, strs{"B"}),
       {{S::cxx, E::changes}},
       {}},
      // Tracked by the key (the headers they reach enter it): no extra_digest.
      {"include_path",
       set_to(&po::include_path, strs{"/inc/a"}, strs{"/inc/b"}),
       {{S::cxx, E::changes}},
       {}},
      {"pre_include",
       set_to(&po::pre_include, strs{"a.h"}, strs{"b.h"}),
       {{S::cxx, E::changes}},
       {}},
      {"no_source_include", set_bool(&po::no_source_include), {{S::cxx, E::truthy}}, {}},
      {"toolkit_include_path", set_bool(&po::toolkit_include_path), {{S::cxx, E::falsy}}, {}},
      // Keyed through the include directories it puts in the toolkit's place where NVRTC bundles
      // headers (13.3+: the wheels stage's 13.5); refused, naming it, where it does not (13.0).
      {"use_bundled_headers",
       set_bool(&po::use_bundled_headers),
       toolkit::nvrtc_version() >= version{13, 3}
           ? std::map<source_type, effect>{{S::cxx, E::truthy}}
           : std::map<source_type, effect>{},
       {}},
      {"headers",
       set_to(&po::headers, std::vector<include_header>{{"a.cuh", "#define A 1"}},
              std::vector<include_header>{{"a.cuh", "#define A 2"}}),
       {{S::cxx, E::changes}},
       {}},
      {"std", set_to(&po::std, opt_str("c++17"), opt_str("c++20")), {{S::cxx, E::changes}}, {}},
      {"builtin_move_forward", set_bool(&po::builtin_move_forward), {{S::cxx, E::changes}}, {}},
      {"builtin_initializer_list",
       set_bool(&po::builtin_initializer_list),
       {{S::cxx, E::changes}},
       {}},
      {"disable_warnings", set_bool(&po::disable_warnings), {{S::cxx, E::truthy}}, {}},
      {"restrict", set_bool(&po::restrict), {{S::cxx, E::truthy}}, {}},
      {"device_as_default_execution_space",
       set_bool(&po::device_as_default_execution_space),
       {{S::cxx, E::truthy}},
       {}},
      {"device_int128", set_bool(&po::device_int128), {{S::cxx, E::truthy}}, {}},
      {"device_float128", set_bool(&po::device_float128), {{S::cxx, E::truthy}}, {}},
      {"optimization_info",
       set_to(&po::optimization_info, opt_str("inline"), opt_str("other")),
       {{S::cxx, E::changes}},
       {}},
      {"no_display_error_number",
       set_bool(&po::no_display_error_number),
       {{S::cxx, E::truthy}},
       {}},
      {"diag_error", set_to(&po::diag_error, ints{1}, ints{2}), {{S::cxx, E::changes}}, {}},
      {"diag_suppress", set_to(&po::diag_suppress, ints{1}, ints{2}), {{S::cxx, E::changes}}, {}},
      {"diag_warn", set_to(&po::diag_warn, ints{1}, ints{2}), {{S::cxx, E::changes}}, {}},
      {"brief_diagnostics", set_bool(&po::brief_diagnostics), {{S::cxx, E::changes}}, {}},
      {"time",
       set_to(&po::time, opt_str("a.csv"), opt_str("b.csv")),
       {{S::cxx, E::side_effect}, {S::ptx, E::presence}},
       {}},
      {"split_compile",
       set_to(&po::split_compile, opt_int(0), opt_int(4)),
       {{S::cxx, E::changes}, {S::ptx, E::changes}},
       {}},
      {"fdevice_syntax_only", set_bool(&po::fdevice_syntax_only), {{S::cxx, E::truthy}}, {}},
      {"minimal", set_bool(&po::minimal), {{S::cxx, E::truthy}}, {}},
      {"no_cache", set_bool(&po::no_cache), {{S::cxx, E::truthy}, {S::ptx, E::truthy}}, {}},
      {"fdevice_time_trace",
       set_to(&po::fdevice_time_trace, opt_str("a.json"), opt_str("b.json")),
       {{S::cxx, E::side_effect}},
       {}},
      {"frandom_seed",
       set_to(&po::frandom_seed, opt_str("1"), opt_str("2")),
       {{S::cxx, E::changes}},
       {}},
      {"ofast_compile",
       set_to(&po::ofast_compile, opt_str("min"), opt_str("max")),
       {{S::cxx, E::changes}},
       {}},
      {"pch", set_bool(&po::pch), {{S::cxx, E::truthy}}, {S::cxx}},
      {"create_pch",
       set_to(&po::create_pch, opt_str("a.pch"), opt_str("b.pch")),
       {{S::cxx, E::side_effect}},
       {}},
      {"use_pch",
       set_to(&po::use_pch, opt_str("a.pch"), opt_str("b.pch")),
       {{S::cxx, E::changes}},
       {S::cxx}},
      {"pch_dir",
       set_to(&po::pch_dir, opt_str("/pch/a"), opt_str("/pch/b")),
       {{S::cxx, E::changes}},
       {S::cxx}},
      {"pch_verbose", set_bool(&po::pch_verbose), {{S::cxx, E::changes}}, {}},
      {"pch_messages", set_bool(&po::pch_messages), {{S::cxx, E::changes}}, {}},
      {"instantiate_templates_in_pch",
       set_bool(&po::instantiate_templates_in_pch),
       {{S::cxx, E::changes}},
       {}},
      // Automatic PCH (c++ only) changes no output (docs/compilation.md), so it is in no key.
      {"auto_pch", set_bool(&po::auto_pch), {{S::cxx, E::ignored}}, {}},
      // The compile server (docs/compile-server.md) compiles the same output: in no key, for any
      // source type (only c++ compiles go to it; the others ignore it).
      {"compile_server",
       set_to(&po::compile_server, std::optional(compile_server_mode::on),
              std::optional(compile_server_mode::off)),
       {{S::cxx, E::ignored}, {S::ptx, E::ignored}, {S::nvvm, E::ignored}},
       {}},
      // Verify mode (docs/verify.md) checks hits against fresh compiles: in no key.
      {"verify",
       set_to(&po::verify, std::optional(1.0), std::optional(0.0)),
       {{S::cxx, E::ignored}, {S::ptx, E::ignored}, {S::nvvm, E::ignored}},
       {}},
      {"verify_in_background",
       set_bool(&po::verify_in_background),
       {{S::cxx, E::ignored}, {S::ptx, E::ignored}, {S::nvvm, E::ignored}},
       {}},
      {"extra_sources",
       set_to(&po::extra_sources, std::vector<nvvm_module>{{"a", "define void @a() { ret void }"}},
              std::vector<nvvm_module>{{"b", "define void @b() { ret void }"}}),
       {{S::nvvm, E::changes}},
       {}},
      {"use_libdevice", set_bool(&po::use_libdevice), {{S::nvvm, E::truthy}}, {S::nvvm}},
      {"numba_debug",
       set_bool(&po::numba_debug),
       {{S::cxx, E::truthy}, {S::ptx, E::ignored}, {S::nvvm, E::truthy}},
       {}},
      {"warning_as_error",
       set_to(&po::warning_as_error, std::vector<std::string>{"reorder"},
              std::vector<std::string>{"all-warnings"}),
       {{S::cxx, E::changes}},
       {}},
      {"wreorder", set_bool(&po::wreorder), {{S::cxx, E::truthy}}, {}},
      {"enable_tile", set_bool(&po::enable_tile), {{S::cxx, E::truthy}}, {}},
      {"tile_only", set_bool(&po::tile_only), {{S::cxx, E::truthy}}, {}},
      {"simt_only", set_bool(&po::simt_only), {{S::cxx, E::truthy}}, {}},
      {"default_tile", set_bool(&po::default_tile), {{S::cxx, E::truthy}}, {}},
      {"diagnose_implicit_tile_var",
       set_bool(&po::diagnose_implicit_tile_var),
       {{S::cxx, E::truthy}},
       {}},
      {"extra_nvrtc_options",
       set_to(&po::extra_nvrtc_options, std::vector<std::string>{"-jtd=50"},
              std::vector<std::string>{"--device-stack-protector=true"}),
       {{S::cxx, E::changes}},
       {}},
  };
}

TEST(MakeProgramCacheKey, FieldTableCoversEveryProgramOption) {
  const auto cases = field_cases();
  EXPECT_EQ(cases.size(), aggregate_field_count<program_options>())
      << "program_options gained or lost a field: add it to field_cases()";
  std::set<std::string> names;
  for (const auto& c : cases) EXPECT_TRUE(names.insert(c.name).second) << c.name << " twice";
}

TEST(MakeProgramCacheKey, EveryOptionChangesTheKeyWhereItMatters) {
  for (const auto& c : field_cases()) {
    for (auto type : kAllTypes) {
      SCOPED_TRACE(c.name + " for " + type_name(type));
      const auto it = c.effects.find(type);
      const effect e = it == c.effects.end() ? effect::refused : it->second;
      const bool digest = c.needs_digest.count(type) > 0;

      auto unset = base(type);
      auto a = base(type);
      auto b = base(type);
      c.set(a.options, 0);
      c.set(b.options, 1);
      if (digest) {
        for (auto* in : {&unset, &a, &b}) in->extra_digest = "fingerprint";
      }

      switch (e) {
        case effect::refused:
        case effect::side_effect: {
          auto msg = refusal(a);
          EXPECT_TRUE(contains(msg, c.name)) << msg;
          if (e == effect::side_effect) {
            a.extra_digest = "fingerprint";
            msg = refusal(a);
            EXPECT_TRUE(contains(msg, c.name)) << msg;
            EXPECT_TRUE(contains(msg, "without the cache")) << msg;
          }
          break;
        }
        case effect::changes:
          EXPECT_NE(key(a), key(unset));
          EXPECT_NE(key(b), key(unset));
          EXPECT_NE(key(a), key(b));
          break;
        case effect::truthy:
          EXPECT_NE(key(a), key(unset));
          EXPECT_EQ(key(b), key(unset)) << "false must be the same as unset";
          break;
        case effect::falsy:
          EXPECT_EQ(key(a), key(unset)) << "true must be the same as unset";
          EXPECT_NE(key(b), key(unset));
          break;
        case effect::presence:
          EXPECT_NE(key(a), key(unset));
          EXPECT_EQ(key(a), key(b));
          break;
        case effect::ignored:
          EXPECT_EQ(key(a), key(unset));
          EXPECT_EQ(key(b), key(unset));
          break;
      }

      // Whatever a key accepts, its option list is exactly what the compiler gets.
      if (e != effect::refused && e != effect::side_effect) {
        EXPECT_EQ(payloads(key(a), "option"), compiler_flags(a.options, type, a.target));
      }
      if (digest && e != effect::refused) {
        a.extra_digest.reset();
        auto msg = refusal(a);
        EXPECT_TRUE(contains(msg, c.name)) << msg;
        EXPECT_TRUE(contains(msg, "extra_digest")) << msg;
      }
    }
  }
}

}  // namespace
}  // namespace cucore
