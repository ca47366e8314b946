// make_program_cache_key and program_cache_key: every input that decides the compiler's output
// changes the key, nothing else does, and every input the key cannot see is refused. This file:
// the key type, its framing and schema, and every program_options field; the other inputs, the
// probes and other processes are in cache_key_inputs_test.cpp, what the key refuses or bypasses in
// cache_key_gates_test.cpp.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_set>
#include <utility>

#include "cache_key_test_support.hpp"
#include "cucore/toolkit.hpp"

namespace cucore {
namespace {

using namespace cucore::testing;  // NOLINT: the key tests' fixtures

// ---------------------------------------------------------------------------------------------
// The key type

TEST(ProgramCacheKey, IsThirtyTwoBytesWithLowercaseHex) {
  auto k = key(base());
  EXPECT_EQ(k.bytes().size(), 32u);
  EXPECT_EQ(program_cache_key::size, 32u);
  const std::string hex = k.hex();
  ASSERT_EQ(hex.size(), 64u);
  EXPECT_TRUE(std::all_of(hex.begin(), hex.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  })) << hex;
}

TEST(ProgramCacheKey, HexRoundTrip) {
  auto k = key(base());
  auto parsed = program_cache_key::from_hex(k.hex());
  EXPECT_EQ(parsed, k);
  EXPECT_TRUE(std::equal(parsed.bytes().begin(), parsed.bytes().end(), k.bytes().begin()));
  EXPECT_TRUE(parsed.explain().empty());
  EXPECT_FALSE(k.explain().empty());

  std::string upper = k.hex();
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  EXPECT_EQ(program_cache_key::from_hex(upper), k);
}

TEST(ProgramCacheKey, FromDigest) {
  std::array<std::byte, 32> digest{};
  for (std::size_t i = 0; i < digest.size(); ++i) digest[i] = static_cast<std::byte>(i * 7 + 1);
  program_cache_key k(digest);
  EXPECT_TRUE(std::equal(k.bytes().begin(), k.bytes().end(), digest.begin()));
  EXPECT_EQ(k.hex().substr(0, 8), "01080f16");
  EXPECT_TRUE(k.explain().empty());
}

TEST(ProgramCacheKey, FromHexRefusesBadInputNamingIt) {
  auto msg = refusal([] { (void)program_cache_key::from_hex("abc"); });
  EXPECT_TRUE(contains(msg, "\"abc\"")) << msg;
  EXPECT_TRUE(contains(msg, "64")) << msg;
  EXPECT_TRUE(contains(msg, "3 characters")) << msg;

  std::string bad(64, '0');
  bad[17] = 'g';
  msg = refusal([&] { (void)program_cache_key::from_hex(bad); });
  EXPECT_TRUE(contains(msg, bad)) << msg;
  EXPECT_TRUE(contains(msg, "\"g\"")) << msg;
  EXPECT_TRUE(contains(msg, "position 17")) << msg;

  msg = refusal([] { (void)program_cache_key::from_hex(""); });
  EXPECT_TRUE(contains(msg, "0 characters")) << msg;
  msg = refusal([] { (void)program_cache_key::from_hex(std::string(65, 'a')); });
  EXPECT_TRUE(contains(msg, "65 characters")) << msg;
  std::string with_nul(64, 'a');
  with_nul[3] = '\0';
  msg = refusal([&] { (void)program_cache_key::from_hex(with_nul); });
  EXPECT_TRUE(contains(msg, "\\x00")) << msg;
}

TEST(ProgramCacheKey, ComparesByDigestOnly) {
  auto a = key(base());
  auto b = program_cache_key::from_hex(a.hex());  // no explanation
  EXPECT_EQ(a, b);
  EXPECT_EQ(a <=> b, std::strong_ordering::equal);
  auto in = base();
  in.code = "extern \"C\" __global__ void k(int* a) { *a = 2; }";
  auto c = key(in);
  EXPECT_NE(a, c);
  EXPECT_EQ((a < c), (a.hex() < c.hex()));  // byte order = hex order
  EXPECT_EQ((a <=> c) == std::strong_ordering::less, a.hex() < c.hex());
  auto copy = a;
  EXPECT_EQ(copy, a);
  EXPECT_EQ(&copy.explain(), &a.explain()) << "copies share the explanation";
}

TEST(ProgramCacheKey, HashableAndOrderable) {
  std::unordered_set<program_cache_key> set;
  std::set<program_cache_key> ordered;
  for (int i = 0; i < 50; ++i) {
    auto in = base();
    in.options.name = "p" + std::to_string(i);
    auto k = key(in);
    set.insert(k);
    set.insert(program_cache_key::from_hex(k.hex()));
    ordered.insert(k);
  }
  EXPECT_EQ(set.size(), 50u);
  EXPECT_EQ(ordered.size(), 50u);
  auto k = key(base());
  EXPECT_EQ(std::hash<program_cache_key>{}(k),
            std::hash<program_cache_key>{}(program_cache_key::from_hex(k.hex())));
}

// ---------------------------------------------------------------------------------------------
// Determinism, framing, schema

TEST(MakeProgramCacheKey, IsDeterministic) {
  for (auto type : kAllTypes) {
    auto a = key(base(type));
    auto b = key(base(type));
    EXPECT_EQ(a, b) << type_name(type);
    EXPECT_EQ(a.explain(), b.explain()) << type_name(type);
  }
}

std::string sha256_bytes(std::string_view data) {
  std::string out(32, '\0');
  unsigned int size = 0;
  EXPECT_EQ(EVP_Digest(data.data(), data.size(), reinterpret_cast<unsigned char*>(out.data()),
                       &size, EVP_sha256(), nullptr),
            1);
  return out;
}

std::string to_hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 0xF];
  }
  return out;
}

// An independent SHA-256 over the documented framing: label bytes, 8-byte big-endian payload
// length, payload; source code enters as its SHA-256.
TEST(MakeProgramCacheKey, FramingIsLabelLengthPayload) {
  auto in = base();
  in.code = "k";  // printable and short: explain() shows every payload as is
  in.name_expressions = {"b", "a"};
  in.extra_digest = "d";
  auto k = key(in);
  std::string stream;
  for (const auto& f : k.explain()) {
    const std::string payload = f.label == "code" ? sha256_bytes(in.code) : f.payload;
    stream += f.label;
    for (int shift = 56; shift >= 0; shift -= 8) {
      stream += static_cast<char>((static_cast<std::uint64_t>(payload.size()) >> shift) & 0xFF);
    }
    stream += payload;
  }
  const std::string expected = sha256_bytes(stream);
  EXPECT_EQ(k.hex(), to_hex(expected));
}

// Pins the schema: field labels, order, framing and the c++ flag list for one input. If this
// fails, keys changed: bump the schema string (kSchema in src/key/key.cpp) and update this.
TEST(MakeProgramCacheKey, GoldenKeyPinsTheSchema) {
  auto in = base();
  in.name_expressions = {"k"};
  in.options.std = "c++17";
  in.options.define_macro = {"N", macro{"M", "2"}};
  in.options.toolkit_include_path = false;  // the toolkit's directories depend on the machine
  EXPECT_EQ(key(in).hex(), "16e6a38d28d07c38c571f15135b468c62ca55181191485bab43104c98b35465a");
  EXPECT_EQ(key(base(source_type::ptx)).hex(),
            "ae3d952a4b902d6d62a9029e41f43e5fecee4045056e043ee73aee38ad7f071b");
  EXPECT_EQ(key(base(source_type::nvvm)).hex(),
            "f33b1771952cbb8c96fd042ab1c372ee89a08f45fa8f4bf0d060328c6f92195c");
  EXPECT_EQ(payloads(key(in), "schema"), std::vector<std::string>{"cucore-key-2"});
}

TEST(MakeProgramCacheKey, ExplainListsFieldsInOrderSchemaFirst) {
  auto in = base();
  in.name_expressions = {"k2", "k1"};
  in.extra_digest = std::string("\x01\x02\x00\xff", 4);
  in.options.toolkit_include_path = false;  // only -arch in the option list
  auto k = key(in);
  std::vector<std::string> expected = {"schema",      "nvrtc", "code_type",
                                       "target_type", "code",  "option_count"};
  for (std::size_t i = 0; i < payloads(k, "option").size(); ++i) expected.push_back("option");
  for (const char* l : {"names_count", "name", "name", "options_name", "extra_digest"}) {
    expected.push_back(l);
  }
  EXPECT_EQ(labels(k), expected);

  const auto& f = k.explain();
  EXPECT_EQ(f[0].payload, "cucore-key-2");
  EXPECT_EQ(f[1].payload, "13.0");
  EXPECT_EQ(f[2].payload, "c++");
  EXPECT_EQ(f[3].payload, "cubin");
  EXPECT_EQ(f[4].payload, kCxx);  // short printable text is shown as is
  EXPECT_EQ(payloads(k, "option_count"), std::vector<std::string>{"1"});
  EXPECT_EQ(payloads(k, "option"), std::vector<std::string>{"-arch=sm_90"});
  EXPECT_EQ(payloads(k, "name"), (std::vector<std::string>{"s:k1", "s:k2"}));
  EXPECT_EQ(payloads(k, "options_name"), std::vector<std::string>{"default_program"});
  EXPECT_EQ(payloads(k, "extra_digest"), std::vector<std::string>{"<4 bytes: 010200ff>"});

  // Long or multi-line code is shown by size and full SHA-256 (as sha256sum prints it).
  auto ptx = key(base(source_type::ptx));
  EXPECT_EQ(payloads(ptx, "code"),
            std::vector<std::string>{"<" + std::to_string(kPtx.size()) + " bytes, sha256 " +
                                     to_hex(sha256_bytes(kPtx)) + ">"});
  // Other long payloads by size and a digest prefix.
  auto long_macro = base();
  long_macro.options.define_macro = {macro{"M", std::string(300, 'x')}};
  long_macro.options.toolkit_include_path = false;
  auto macro_options = payloads(key(long_macro), "option");
  ASSERT_EQ(macro_options.size(), 2u);
  const std::string flag = "--define-macro=M=" + std::string(300, 'x');
  EXPECT_EQ(macro_options[1], "<" + std::to_string(flag.size()) + " bytes, sha256 " +
                                  to_hex(sha256_bytes(flag)).substr(0, 12) + "...>");
  EXPECT_EQ(labels(ptx)[1], "linker_backend");
  EXPECT_EQ(payloads(ptx, "linker_backend"), std::vector<std::string>{"nvJitLink"});
  EXPECT_EQ(payloads(ptx, "linker_version"), std::vector<std::string>{"13.0"});

  auto nvvm_in = base(source_type::nvvm);
  nvvm_in.options.extra_sources = {{"helper", "define void @h() { ret void }"}};
  nvvm_in.options.use_libdevice = true;
  nvvm_in.extra_digest = "libdevice-fingerprint";
  auto nvvm = key(nvvm_in);
  EXPECT_EQ(labels(nvvm),
            (std::vector<std::string>{"schema", "nvvm", "code_type", "target_type", "code",
                                      "option_count", "option", "extra_sources_count",
                                      "extra_source_name", "extra_source_code", "use_libdevice",
                                      "options_name", "extra_digest"}));
  EXPECT_EQ(payloads(nvvm, "nvvm"), std::vector<std::string>{"lib=2.0;ir=2.0.3.2"});
  EXPECT_EQ(payloads(nvvm, "option"), std::vector<std::string>{"-arch=compute_90"});
  EXPECT_EQ(payloads(nvvm, "extra_source_name"), std::vector<std::string>{"helper"});
}

TEST(MakeProgramCacheKey, OptionListIsCompilerFlags) {
  for (auto type : kAllTypes) {
    for (auto target : supported_targets(type)) {
      auto in = base(type);
      in.target = target;
      in.options.debug = true;
      if (type != source_type::nvvm) in.options.max_register_count = 64;
      if (type == source_type::cxx) in.options.define_macro = {macro{"A", "1"}};
      auto k = key(in);
      EXPECT_EQ(payloads(k, "option"), compiler_flags(in.options, type, target))
          << type_name(type) << " -> " << to_string(target);
      EXPECT_EQ(payloads(k, "option_count"), std::vector<std::string>{std::to_string(
                                                 compiler_flags(in.options, type, target).size())});
    }
  }
}

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
  // Sets the field: variant 0 and variant 1 are two different values (for a bool: true, false).
  using setter = std::function<void(program_options&, int)>;
  // A constructor, not an aggregate: most rows leave needs_digest out.
  field_case(std::string n, setter s, std::map<source_type, effect> e,
             std::set<source_type> digest = {})
      : name(std::move(n)),
        set(std::move(s)),
        effects(std::move(e)),
        needs_digest(std::move(digest)) {}

  std::string name;
  setter set;
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

// The same effect for every code type.
std::map<source_type, effect> every(effect e) {
  return {{S::cxx, e}, {S::ptx, e}, {S::nvvm, e}};
}

// Rows for bool fields that act alike, each with `effects`. `members` is the text of the list
// `fields` (CUCORE_BOOL_FIELDS spells it): each row's name is its member's, so the two cannot
// drift.
void add_bools(std::vector<field_case>& cases, const std::map<source_type, effect>& effects,
               std::string_view members,
               std::initializer_list<std::optional<bool> program_options::*> fields) {
  for (auto field : fields) {
    const std::size_t comma = std::min(members.find(','), members.size());
    std::string_view name = members.substr(0, comma);
    members.remove_prefix(std::min(comma + 1, members.size()));
    name.remove_prefix(name.find("::") + 2);
    while (name.ends_with(' ')) name.remove_suffix(1);
    cases.emplace_back(std::string(name), set_bool(field), effects);
  }
}
#define CUCORE_BOOL_FIELDS(...) \
#__VA_ARGS__, {               \
    __VA_ARGS__                 \
  }

std::vector<field_case> field_cases() {
  using strs = std::vector<std::string>;
  using opt_str = std::optional<std::string>;
  using opt_int = std::optional<int>;
  using ints = std::vector<int>;
  using po = program_options;
  std::vector<field_case> cases = {
      {"name", set_to(&po::name, std::string("a"), std::string("b")), every(E::changes)},
      {"arch", set_to(&po::arch, opt_str("sm_80"), opt_str("sm_100")), every(E::changes)},
      {"relocatable_device_code",
       set_bool(&po::relocatable_device_code),
       {{S::cxx, E::changes}, {S::ptx, E::truthy}}},  // ptx: nvJitLink -r
      {"device_code_optimize",
       set_bool(&po::device_code_optimize),
       {{S::cxx, E::truthy}, {S::nvvm, E::changes}}},
      {"ptxas_options",
       set_to(&po::ptxas_options, strs{"-v"}, strs{"-O1"}),
       {{S::cxx, E::changes}, {S::ptx, E::changes}}},
      {"max_register_count",
       set_to(&po::max_register_count, opt_int(32), opt_int(64)),
       {{S::cxx, E::changes}, {S::ptx, E::changes}}},
      {"define_macro",
       set_to(&po::define_macro, std::vector<macro>{"A"}, std::vector<macro>{macro{"A", "1"}}),
       {{S::cxx, E::changes}}},
      {"undefine_macro", set_to(&po::undefine_macro, strs{"A"}, strs{"B"}), {{S::cxx, E::changes}}},
      // Tracked by the key (the headers they reach enter it): no extra_digest.
      {"include_path",
       set_to(&po::include_path, strs{"/inc/a"}, strs{"/inc/b"}),
       {{S::cxx, E::changes}}},
      {"pre_include", set_to(&po::pre_include, strs{"a.h"}, strs{"b.h"}), {{S::cxx, E::changes}}},
      {"toolkit_include_path", set_bool(&po::toolkit_include_path), {{S::cxx, E::falsy}}},
      // Keyed through the include directories it puts in the toolkit's place where NVRTC bundles
      // headers (13.3+: the wheels stage's 13.5); refused, naming it, where it does not (13.0).
      {"use_bundled_headers", set_bool(&po::use_bundled_headers),
       toolkit::nvrtc_version() >= version{13, 3}
           ? std::map<source_type, effect>{{S::cxx, E::truthy}}
           : std::map<source_type, effect>{}},
      {"headers",
       set_to(&po::headers, std::vector<include_header>{{"a.cuh", "#define A 1"}},
              std::vector<include_header>{{"a.cuh", "#define A 2"}}),
       {{S::cxx, E::changes}}},
      {"std", set_to(&po::std, opt_str("c++17"), opt_str("c++20")), {{S::cxx, E::changes}}},
      {"optimization_info",
       set_to(&po::optimization_info, opt_str("inline"), opt_str("other")),
       {{S::cxx, E::changes}}},
      {"diag_error", set_to(&po::diag_error, ints{1}, ints{2}), {{S::cxx, E::changes}}},
      {"diag_suppress", set_to(&po::diag_suppress, ints{1}, ints{2}), {{S::cxx, E::changes}}},
      {"diag_warn", set_to(&po::diag_warn, ints{1}, ints{2}), {{S::cxx, E::changes}}},
      {"time",
       set_to(&po::time, opt_str("a.csv"), opt_str("b.csv")),
       {{S::cxx, E::side_effect}, {S::ptx, E::presence}}},
      {"split_compile",
       set_to(&po::split_compile, opt_int(0), opt_int(4)),
       {{S::cxx, E::changes}, {S::ptx, E::changes}}},
      {"fdevice_time_trace",
       set_to(&po::fdevice_time_trace, opt_str("a.json"), opt_str("b.json")),
       {{S::cxx, E::side_effect}}},
      {"frandom_seed",
       set_to(&po::frandom_seed, opt_str("1"), opt_str("2")),
       {{S::cxx, E::changes}}},
      {"ofast_compile",
       set_to(&po::ofast_compile, opt_str("min"), opt_str("max")),
       {{S::cxx, E::changes}}},
      {"pch", set_bool(&po::pch), {{S::cxx, E::truthy}}, {S::cxx}},
      {"create_pch",
       set_to(&po::create_pch, opt_str("a.pch"), opt_str("b.pch")),
       {{S::cxx, E::side_effect}}},
      {"use_pch",
       set_to(&po::use_pch, opt_str("a.pch"), opt_str("b.pch")),
       {{S::cxx, E::changes}},
       {S::cxx}},
      {"pch_dir",
       set_to(&po::pch_dir, opt_str("/pch/a"), opt_str("/pch/b")),
       {{S::cxx, E::changes}},
       {S::cxx}},
      // Automatic PCH (c++ only) changes no output (docs/compilation.md), so it is in no key.
      {"auto_pch", set_bool(&po::auto_pch), {{S::cxx, E::ignored}}},
      // The compile server (docs/compile-server.md) compiles the same output: in no key, for any
      // source type (only c++ compiles go to it; the others ignore it).
      {"compile_server",
       set_to(&po::compile_server, std::optional(compile_server_mode::on),
              std::optional(compile_server_mode::off)),
       every(E::ignored)},
      // Verify mode (docs/verify.md) checks hits against fresh compiles: in no key.
      {"verify", set_to(&po::verify, std::optional(1.0), std::optional(0.0)), every(E::ignored)},
      {"verify_in_background", set_bool(&po::verify_in_background), every(E::ignored)},
      {"extra_sources",
       set_to(&po::extra_sources, std::vector<nvvm_module>{{"a", "define void @a() { ret void }"}},
              std::vector<nvvm_module>{{"b", "define void @b() { ret void }"}}),
       {{S::nvvm, E::changes}}},
      {"use_libdevice", set_bool(&po::use_libdevice), {{S::nvvm, E::truthy}}, {S::nvvm}},
      {"numba_debug",
       set_bool(&po::numba_debug),
       {{S::cxx, E::truthy}, {S::ptx, E::ignored}, {S::nvvm, E::truthy}}},
      {"warning_as_error",
       set_to(&po::warning_as_error, std::vector<std::string>{"reorder"},
              std::vector<std::string>{"all-warnings"}),
       {{S::cxx, E::changes}}},
      {"extra_nvrtc_options",
       set_to(&po::extra_nvrtc_options, std::vector<std::string>{"-jtd=50"},
              std::vector<std::string>{"--device-stack-protector=true"}),
       {{S::cxx, E::changes}}},
  };
  add_bools(cases, every(E::truthy), CUCORE_BOOL_FIELDS(&po::debug));
  add_bools(cases, every(E::changes),
            CUCORE_BOOL_FIELDS(&po::ftz, &po::prec_sqrt, &po::prec_div, &po::fma));
  add_bools(cases, {{S::cxx, E::truthy}, {S::ptx, E::truthy}},
            CUCORE_BOOL_FIELDS(&po::lineinfo, &po::link_time_optimization, &po::no_cache));
  add_bools(cases, {{S::cxx, E::changes}},
            CUCORE_BOOL_FIELDS(&po::builtin_move_forward, &po::builtin_initializer_list,
                               &po::brief_diagnostics, &po::pch_verbose, &po::pch_messages,
                               &po::instantiate_templates_in_pch));
  // c++ only, and only when true: the flag is emitted only then.
  add_bools(cases, {{S::cxx, E::truthy}},
            CUCORE_BOOL_FIELDS(
                &po::extensible_whole_program, &po::use_fast_math, &po::extra_device_vectorization,
                &po::gen_opt_lto, &po::no_source_include, &po::disable_warnings, &po::restrict,
                &po::device_as_default_execution_space, &po::device_int128, &po::device_float128,
                &po::no_display_error_number, &po::fdevice_syntax_only, &po::minimal, &po::wreorder,
                &po::enable_tile, &po::tile_only, &po::simt_only, &po::default_tile,
                &po::diagnose_implicit_tile_var));
  return cases;
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
