// make_program_cache_key and program_cache_key: every input that decides the compiler's output
// changes the key, nothing else does, and every input the key cannot see is refused.
#include "cucore/cache/key.hpp"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <unordered_set>
#include <utility>

#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/toolkit.hpp"
#include "test_support.hpp"

extern char** environ;  // NOLINT

namespace cucore {
namespace {

using cucore::testing::contains;
using cucore::testing::temp_dir;

// ---------------------------------------------------------------------------------------------
// Fixtures

// Compiler identities the test chooses.
class fixed_probes final : public compiler_probes {
 public:
  version_probe nvrtc_result{true, "13.0"};
  version_probe nvvm_result{true, "lib=2.0;ir=2.0.3.2"};
  linker_probe linker_result{true, linker_backend::nvjitlink, "13.0", ""};

  version_probe nvrtc() const override { return nvrtc_result; }
  version_probe nvvm() const override { return nvvm_result; }
  linker_probe linker() const override { return linker_result; }

  static fixed_probes driver(std::string version = "13000") {
    fixed_probes p;
    p.linker_result = {true, linker_backend::driver, std::move(version), ""};
    return p;
  }
};

const fixed_probes kProbes;

constexpr std::string_view kCxx = "extern \"C\" __global__ void k(int* a) { *a = 1; }";
constexpr std::string_view kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n";
constexpr std::string_view kNvvm =
    "target triple = \"nvptx64-nvidia-cuda\"\ndefine void @k() {\n  ret void\n}\n";

program_cache_key_inputs base(source_type type = source_type::cxx) {
  program_cache_key_inputs in;
  in.code_type = type;
  in.options.arch = "sm_90";
  switch (type) {
    case source_type::cxx:
      in.code = kCxx;
      in.target = code_type::cubin;
      break;
    case source_type::ptx:
      in.code = kPtx;
      in.target = code_type::cubin;
      break;
    case source_type::nvvm:
      in.code = kNvvm;
      in.target = code_type::ptx;
      break;
  }
  return in;
}

program_cache_key key(const program_cache_key_inputs& in, const compiler_probes& p = kProbes) {
  return make_program_cache_key(in, p);
}

// The message of the invalid_argument `f` throws (fails the test when it throws nothing).
std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected invalid_argument";
  return {};
}

std::string refusal(const program_cache_key_inputs& in, const compiler_probes& p = kProbes) {
  return refusal([&] { (void)make_program_cache_key(in, p); });
}

std::vector<std::string> labels(const program_cache_key& k) {
  std::vector<std::string> out;
  for (const auto& f : k.explain()) out.push_back(f.label);
  return out;
}

std::vector<std::string> payloads(const program_cache_key& k, std::string_view label) {
  std::vector<std::string> out;
  for (const auto& f : k.explain()) {
    if (f.label == label) out.push_back(f.payload);
  }
  return out;
}

const char* type_name(source_type t) {
  switch (t) {
    case source_type::cxx:
      return "c++";
    case source_type::ptx:
      return "ptx";
    case source_type::nvvm:
      return "nvvm";
  }
  return "?";
}

constexpr source_type kAllTypes[] = {source_type::cxx, source_type::ptx, source_type::nvvm};

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

// ---------------------------------------------------------------------------------------------
// The other inputs

TEST(MakeProgramCacheKey, CodeChangesTheKey) {
  for (auto type : kAllTypes) {
    auto in = base(type);
    const std::string changed = std::string(in.code) + " ";
    auto other = base(type);
    other.code = changed;
    EXPECT_NE(key(in), key(other)) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, CodeTypeChangesTheKey) {
  // Same code text, options and target: only the code type differs.
  auto cxx = base(source_type::cxx);
  auto ptx = base(source_type::ptx);
  ptx.code = cxx.code;
  auto nvvm = base(source_type::nvvm);
  nvvm.code = cxx.code;
  nvvm.target = code_type::ptx;
  auto cxx_ptx = cxx;
  cxx_ptx.target = code_type::ptx;
  EXPECT_NE(key(cxx), key(ptx));
  EXPECT_NE(key(cxx_ptx), key(nvvm));
}

TEST(MakeProgramCacheKey, TargetChangesTheKey) {
  std::set<program_cache_key> keys;
  for (auto target : {code_type::ptx, code_type::cubin, code_type::ltoir}) {
    auto in = base();
    in.target = target;
    keys.insert(key(in));
  }
  EXPECT_EQ(keys.size(), 3u);
  auto ptx = base(source_type::nvvm);
  auto lto = base(source_type::nvvm);
  lto.target = code_type::ltoir;
  EXPECT_NE(key(ptx), key(lto));
}

TEST(MakeProgramCacheKey, TargetMatrixIsCheckTarget) {
  for (auto type : kAllTypes) {
    for (auto target : {code_type::ptx, code_type::cubin, code_type::ltoir, code_type::fatbin,
                        code_type::object, code_type::library}) {
      auto in = base(type);
      in.target = target;
      const auto ok = supported_targets(type);
      if (std::find(ok.begin(), ok.end(), target) != ok.end()) {
        EXPECT_NO_THROW((void)key(in)) << type_name(type) << " -> " << to_string(target);
      } else {
        auto msg = refusal(in);
        EXPECT_TRUE(contains(msg, to_string(target))) << msg;
        EXPECT_TRUE(contains(msg, "supported")) << msg;
      }
    }
  }
  // Unlike cuda.core, ptx -> ptx is refused: no backend turns PTX into PTX.
  auto in = base(source_type::ptx);
  in.target = code_type::ptx;
  EXPECT_TRUE(contains(refusal(in), "cubin"));
}

TEST(MakeProgramCacheKey, LinkTimeOptimizationIsImpliedByLtoirTarget) {
  auto a = base();
  a.target = code_type::ltoir;
  auto b = a;
  b.options.link_time_optimization = true;
  EXPECT_EQ(key(a), key(b)) << "NVRTC gets the same flags, so the same key";
}

TEST(MakeProgramCacheKey, NameExpressionsAreASet) {
  auto a = base();
  a.name_expressions = {"k<int>", "k<float>", "v"};
  auto b = base();
  b.name_expressions = {"v", "k<float>", "k<int>"};
  auto c = base();
  c.name_expressions = {"v", "k<float>", "k<int>", "v"};
  EXPECT_EQ(key(a), key(b));
  EXPECT_EQ(key(a), key(c)) << "repeats map to the same symbols";

  auto d = base();
  d.name_expressions = {"k<int>", "k<float>"};
  auto e = base();
  e.name_expressions = {"k<int>", "k<float>", "w"};
  EXPECT_NE(key(a), key(d));
  EXPECT_NE(key(a), key(e));
  EXPECT_NE(key(base()), key(d));
  // No concatenation ambiguity: {"ab"} is not {"a", "b"}.
  auto f = base();
  f.name_expressions = {"ab"};
  auto g = base();
  g.name_expressions = {"a", "b"};
  EXPECT_NE(key(f), key(g));
}

TEST(MakeProgramCacheKey, NameExpressionsMustBeNonEmptyText) {
  auto in = base();
  in.name_expressions = {"k", ""};
  auto msg = refusal(in);
  EXPECT_TRUE(contains(msg, "name_expressions[1]")) << msg;
  in.name_expressions = {std::string("k\0x", 3)};
  msg = refusal(in);
  EXPECT_TRUE(contains(msg, "NUL")) << msg;
}

// A binding's byte-string expressions (Python's b"k") key apart from the same text, as cuda.core's
// keys do; a text-only key is what it always was (the golden key pins that).
TEST(MakeProgramCacheKey, ByteNameExpressionsKeyApartFromText) {
  auto text = base();
  text.name_expressions = {"k<int>"};
  auto bytes = base();
  bytes.byte_name_expressions = {"k<int>"};
  auto both = base();
  both.name_expressions = {"k<int>"};
  both.byte_name_expressions = {"k<int>"};
  EXPECT_NE(key(text), key(bytes));
  EXPECT_NE(key(text), key(both));
  EXPECT_NE(key(bytes), key(both));
  EXPECT_NE(key(bytes), key(base()));
  EXPECT_EQ(payloads(key(bytes), "name"), std::vector<std::string>{"b:k<int>"});
  EXPECT_EQ(payloads(key(both), "name"), (std::vector<std::string>{"b:k<int>", "s:k<int>"}));
  auto repeated = base();
  repeated.byte_name_expressions = {"k<int>", "k<int>"};
  EXPECT_EQ(key(repeated), key(bytes)) << "a set, like name_expressions";
  bytes.byte_name_expressions = {"k", ""};
  auto msg = refusal(bytes);
  EXPECT_TRUE(contains(msg, "byte_name_expressions[1]")) << msg;
  for (auto type : {source_type::ptx, source_type::nvvm}) {
    auto in = base(type);
    in.byte_name_expressions = {"k", ""};
    EXPECT_EQ(key(in), key(base(type))) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, NameExpressionsIgnoredOutsideCxx) {
  for (auto type : {source_type::ptx, source_type::nvvm}) {
    auto in = base(type);
    in.name_expressions = {"k", "", std::string("a\0b", 3)};
    EXPECT_EQ(key(in), key(base(type))) << type_name(type);
    EXPECT_TRUE(payloads(key(in), "names_count").empty());
  }
}

TEST(MakeProgramCacheKey, ExtraDigest) {
  auto none = base();
  auto empty = base();
  empty.extra_digest = "";
  auto a = base();
  a.extra_digest = std::string(32, '\0');
  auto b = base();
  b.extra_digest = std::string(31, '\0') + '\x01';
  std::set<program_cache_key> keys = {key(none), key(empty), key(a), key(b)};
  EXPECT_EQ(keys.size(), 4u);
  for (auto type : {source_type::ptx, source_type::nvvm}) {
    auto with = base(type);
    with.extra_digest = "x";
    EXPECT_NE(key(with), key(base(type))) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, ProgramNameChangesTheKey) {
  for (auto type : kAllTypes) {
    auto in = base(type);
    in.options.name = "other";
    EXPECT_NE(key(in), key(base(type))) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, NvvmExtraSourcesInCallerOrder) {
  auto a = base(source_type::nvvm);
  a.options.extra_sources = {{"x", "define void @x() { ret void }"},
                             {"y", "define void @y() { ret void }"}};
  auto b = a;
  std::swap(b.options.extra_sources[0], b.options.extra_sources[1]);
  EXPECT_NE(key(a), key(b)) << "modules are added in order";
  auto renamed = a;
  renamed.options.extra_sources[0].name = "z";
  EXPECT_NE(key(a), key(renamed));
  // Name/code boundaries cannot be shifted.
  auto c = base(source_type::nvvm);
  c.options.extra_sources = {{"ab", "c"}};
  auto d = base(source_type::nvvm);
  d.options.extra_sources = {{"a", "bc"}};
  EXPECT_NE(key(c), key(d));
}

TEST(MakeProgramCacheKey, NvvmAcceptsBitcodeWithNul) {
  auto in = base(source_type::nvvm);
  const std::string bitcode("BC\xC0\xDE\0\0\x01", 7);
  in.code = bitcode;
  EXPECT_NO_THROW((void)key(in));
  auto other = base(source_type::nvvm);
  const std::string bitcode2("BC\xC0\xDE\0\0\x02", 7);
  other.code = bitcode2;
  EXPECT_NE(key(in), key(other));
}

TEST(MakeProgramCacheKey, RefusesNulInTextCodeAndEmptyCode) {
  for (auto type : {source_type::cxx, source_type::ptx}) {
    auto in = base(type);
    const std::string code("__global__ void k() {}\0", 23);
    in.code = code;
    auto msg = refusal(in);
    EXPECT_TRUE(contains(msg, "NUL")) << msg;
  }
  for (auto type : kAllTypes) {
    auto in = base(type);
    in.code = "";
    EXPECT_TRUE(contains(refusal(in), "empty"));
  }
}

// NVRTC takes an empty program name as "default_program" (and so does cuda.core): accepted, keyed
// as the name the result carries.
TEST(MakeProgramCacheKey, EmptyProgramNameIsAcceptedAndKeyed) {
  for (auto type : kAllTypes) {
    auto in = base(type);
    in.options.name = "";
    EXPECT_NE(key(in), key(base(type))) << type_name(type);
    EXPECT_EQ(payloads(key(in), "options_name"), std::vector<std::string>{""});
  }
}

TEST(MakeProgramCacheKey, RefusesUnknownCodeType) {
  auto in = base();
  in.code_type = static_cast<source_type>(42);
  auto msg = refusal(in);
  EXPECT_TRUE(contains(msg, "42")) << msg;
}

TEST(MakeProgramCacheKey, RefusesInvalidArch) {
  auto in = base();
  in.options.arch = "sm_9";
  auto msg = refusal(in);
  EXPECT_TRUE(contains(msg, "sm_9")) << msg;
}

TEST(MakeProgramCacheKey, UnresolvedArchWithoutGpu) {
  auto in = base();
  in.options.arch.reset();
  if (toolkit::device_count() > 0) {
    auto resolved = base();
    resolved.options.arch = toolkit::current_device_arch();
    EXPECT_EQ(key(in), key(resolved)) << "arch defaults to the current device's";
    GTEST_SKIP() << "a GPU is present: arch resolves";
  }
  for (auto type : kAllTypes) {
    in = base(type);
    in.options.arch.reset();
    auto msg = refusal(in);
    EXPECT_TRUE(contains(msg, "arch")) << msg;
  }
}

// ---------------------------------------------------------------------------------------------
// Probes

TEST(MakeProgramCacheKey, NvrtcVersionChangesOnlyCxxKeys) {
  fixed_probes other = kProbes;
  other.nvrtc_result.value = "13.1";
  EXPECT_NE(key(base(), other), key(base()));
  EXPECT_EQ(key(base(source_type::ptx), other), key(base(source_type::ptx)));
  EXPECT_EQ(key(base(source_type::nvvm), other), key(base(source_type::nvvm)));
  fixed_probes build = kProbes;
  build.nvrtc_result.value = "13.0;release=V13.0.88;build=CL-1";
  fixed_probes build2 = kProbes;
  build2.nvrtc_result.value = "13.0;release=V13.0.89;build=CL-2";
  EXPECT_NE(key(base(), build), key(base(), build2));
}

TEST(MakeProgramCacheKey, NvvmVersionsChangeOnlyNvvmKeys) {
  fixed_probes lib = kProbes;
  lib.nvvm_result.value = "lib=2.1;ir=2.0.3.2";
  fixed_probes ir = kProbes;
  ir.nvvm_result.value = "lib=2.0;ir=2.0.3.3";
  const auto k = key(base(source_type::nvvm));
  EXPECT_NE(key(base(source_type::nvvm), lib), k);
  EXPECT_NE(key(base(source_type::nvvm), ir), k);
  EXPECT_NE(key(base(source_type::nvvm), lib), key(base(source_type::nvvm), ir));
  EXPECT_EQ(key(base(), lib), key(base()));
  EXPECT_EQ(key(base(source_type::ptx), ir), key(base(source_type::ptx)));
}

TEST(MakeProgramCacheKey, LinkerProbeChangesOnlyPtxKeys) {
  const auto k = key(base(source_type::ptx));
  fixed_probes bump = kProbes;
  bump.linker_result.version = "13.1";
  EXPECT_NE(key(base(source_type::ptx), bump), k);
  // Backend flip with the same version text.
  fixed_probes flip = kProbes;
  flip.linker_result.backend = linker_backend::driver;
  EXPECT_NE(key(base(source_type::ptx), flip), k);
  for (auto type : {source_type::cxx, source_type::nvvm}) {
    fixed_probes failed = kProbes;
    failed.linker_result = {false, linker_backend::driver, "", "library_not_found"};
    EXPECT_EQ(key(base(type), failed), key(base(type))) << type_name(type);
    EXPECT_EQ(key(base(type), bump), key(base(type))) << type_name(type);
    EXPECT_EQ(key(base(type), fixed_probes::driver()), key(base(type))) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, DriverVersionMattersOnlyUnderTheDriverLinker) {
  auto in = base(source_type::ptx);
  EXPECT_NE(key(in, fixed_probes::driver("13000")), key(in, fixed_probes::driver("13010")));
  EXPECT_NE(key(in, fixed_probes::driver("13000;file=libcuda.so.580.65.06")),
            key(in, fixed_probes::driver("13000;file=libcuda.so.580.82.07")));
  // Under nvJitLink the linker probe carries nvJitLink's identity only: the driver is no input.
  EXPECT_EQ(payloads(key(in), "linker_backend"), std::vector<std::string>{"nvJitLink"});
  EXPECT_EQ(payloads(key(in), "linker_version"), std::vector<std::string>{"13.0"});
}

TEST(MakeProgramCacheKey, ProbeFailureFailsClosed) {
  struct probe_case {
    source_type type;
    fixed_probes failed;
    const char* label;
  };
  fixed_probes nvrtc_failed = kProbes;
  nvrtc_failed.nvrtc_result = {false, "library_not_found"};
  fixed_probes nvvm_failed = kProbes;
  nvvm_failed.nvvm_result = {false, "library_not_found"};
  fixed_probes linker_failed = kProbes;
  linker_failed.linker_result = {false, linker_backend::nvjitlink, "", "library_not_found"};
  for (const auto& c : {probe_case{source_type::cxx, nvrtc_failed, "nvrtc_probe_failed"},
                        probe_case{source_type::nvvm, nvvm_failed, "nvvm_probe_failed"},
                        probe_case{source_type::ptx, linker_failed, "linker_probe_failed"}}) {
    SCOPED_TRACE(type_name(c.type));
    const auto working = key(base(c.type));
    const auto failed = key(base(c.type), c.failed);
    EXPECT_NE(failed, working);
    EXPECT_EQ(failed, key(base(c.type), c.failed)) << "stable across calls";
    EXPECT_EQ(labels(failed)[1], c.label);
    EXPECT_EQ(failed.explain()[1].payload, "library_not_found");
    // A failure never collides with a working probe whose value is the failure text.
    fixed_probes lookalike = kProbes;
    lookalike.nvrtc_result.value = "library_not_found";
    lookalike.nvvm_result.value = "library_not_found";
    lookalike.linker_result.version = "library_not_found";
    EXPECT_NE(failed, key(base(c.type), lookalike));
    // Different failure kinds differ.
    fixed_probes other = c.failed;
    other.nvrtc_result.value = "other";
    other.nvvm_result.value = "other";
    other.linker_result.failure = "other";
    EXPECT_NE(failed, key(base(c.type), other));
  }
}

// ---------------------------------------------------------------------------------------------
// Gates

TEST(MakeProgramCacheKey, SideEffectOptionsRefusedForCxxEvenWithDigest) {
  for (auto [name, set] :
       std::vector<std::pair<std::string, std::function<void(program_options&)>>>{
           {"create_pch", [](program_options& o) { o.create_pch = "x.pch"; }},
           {"time", [](program_options& o) { o.time = "timing.csv"; }},
           {"fdevice_time_trace", [](program_options& o) { o.fdevice_time_trace = "trace.json"; }},
       }) {
    for (bool digest : {false, true}) {
      auto in = base();
      set(in.options);
      if (digest) in.extra_digest = "fingerprint";
      auto msg = refusal(in);
      EXPECT_TRUE(contains(msg, name)) << msg;
      EXPECT_TRUE(contains(msg, "side effect")) << msg;
      EXPECT_TRUE(contains(msg, "without the cache")) << msg;
    }
  }
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

TEST(MakeProgramCacheKey, ExtraNvrtcOptionsForToolsInsideNvrtcAreRefusedEvenWithDigest) {
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"-Xcudafe", "--diag_suppress=177"}, {"-jtd=50", "-Xnvvm=-opt=3"}, {"--Xcudafe=-x"}}) {
    for (bool digest : {false, true}) {
      SCOPED_TRACE(extra.back() + (digest ? " with a digest" : ""));
      auto in = base();
      in.options.extra_nvrtc_options = extra;
      if (digest) in.extra_digest = "fingerprint";
      try {
        (void)key(in);
        ADD_FAILURE() << "keyed";
      } catch (const extra_digest_required& e) {
        ADD_FAILURE() << "an extra_digest cannot cover what these may write: " << e.what();
      } catch (const invalid_argument& e) {
        const std::string msg = e.what();
        EXPECT_TRUE(contains(msg, "extra_nvrtc_options")) << msg;
        EXPECT_TRUE(contains(msg, "\"" + extra.back() + "\"")) << msg;
        EXPECT_TRUE(contains(msg, "without the cache")) << msg;
      }
    }
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
    for (bool digest : {false, true}) {
      SCOPED_TRACE(extra.front() + (digest ? " with a digest" : ""));
      auto in = base();
      in.options.extra_nvrtc_options = extra;
      if (digest) in.extra_digest = "fingerprint";
      try {
        (void)key(in);
        ADD_FAILURE() << "keyed";
      } catch (const extra_digest_required& e) {
        ADD_FAILURE() << "an extra_digest does not say what the option does: " << e.what();
      } catch (const invalid_argument& e) {
        const std::string msg = e.what();
        EXPECT_TRUE(contains(msg, "extra_nvrtc_options \"")) << msg;
        EXPECT_TRUE(contains(msg, why)) << msg;
        EXPECT_TRUE(contains(msg, "without the cache")) << msg;
      }
    }
  }
  auto in = base();
  in.options.extra_nvrtc_options = {
      "--jump-table-density", "50", "--device-stack-protector=true", "-err-no", "-Wconversion",
      "-fmax-errors=3"};
  EXPECT_NO_THROW((void)key(in));
}

TEST(MakeProgramCacheKey, PrecompiledHeadersNeedExtraDigest) {
  for (auto [name, set] :
       std::vector<std::pair<std::string, std::function<void(program_options&)>>>{
           {"pch", [](program_options& o) { o.pch = true; }},
           {"use_pch", [](program_options& o) { o.use_pch = "x.pch"; }},
           {"pch_dir", [](program_options& o) { o.pch_dir = "/tmp/pch"; }},
       }) {
    SCOPED_TRACE(name);
    auto in = base();
    set(in.options);
    try {
      (void)key(in);
      ADD_FAILURE() << "accepted without extra_digest";
    } catch (const extra_digest_required& e) {
      EXPECT_TRUE(contains(e.what(), name)) << e.what();
      EXPECT_TRUE(contains(e.what(), "extra_digest")) << e.what();
      EXPECT_TRUE(contains(e.what(), "without the cache")) << e.what();
    }

    in.extra_digest = "headers-v1";
    const auto k1 = key(in);
    in.extra_digest = "headers-v2";
    EXPECT_NE(key(in), k1) << "different digests, different keys";
  }
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
  for (const auto& code : reaching) {
    SCOPED_TRACE(code);
    auto in = base();
    const std::string text = code + std::string(kCxx);
    in.code = text;
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
  }

  // What the scan cannot see through, it refuses (and with an extra_digest, lists as vouched):
  // a macro defined nowhere, and names built from macros NVRTC predefines (values unknown here).
  const std::vector<std::string> unresolvable = {
      "#include HEADER\n",
      "#define STR2(x) #x\n#define STR(x) STR2(x)\n#include STR(__CUDACC_VER_MAJOR__.h)\n",
      "#define H(x) <x.h>\n#include H(__CUDACC_VER_MINOR__)\n",
  };
  for (const auto& code : unresolvable) {
    SCOPED_TRACE(code);
    auto in = base();
    const std::string text = code + std::string(kCxx);
    in.code = text;
    try {
      (void)key(in);
      ADD_FAILURE() << "accepted without extra_digest";
    } catch (const extra_digest_required& e) {
      EXPECT_TRUE(contains(e.what(), "extra_digest")) << e.what();
    }
    in.extra_digest = "fingerprint";
    const auto k = key(in);
    EXPECT_TRUE(k.includes().tracked);
    EXPECT_FALSE(k.includes().vouched.empty());
    EXPECT_FALSE(payloads(k, "untracked_include").empty());
  }

  const std::vector<std::string> no_directive = {
      "// the code includes nothing\n",
      "int include = 1;\n",
      "const char* s = \"include\";\n",
  };
  for (const auto& code : no_directive) {
    SCOPED_TRACE(code);
    auto in = base();
    const std::string text = code + std::string(kCxx);
    in.code = text;
    EXPECT_FALSE(key(in).includes().tracked);
  }

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
  for (auto [name, set] :
       std::vector<std::pair<std::string, std::function<void(program_options&)>>>{
           {"__GNUC__",
            [](program_options& o) {
              o.define_macro = {macro{"__GNUC__", "12"}};
            }},
           {"__QNX__", [](program_options& o) { o.define_macro = {"__QNX__"}; }},
           {"__CUDACC_RTC__", [](program_options& o) { o.undefine_macro = {"__CUDACC_RTC__"}; }},
       }) {
    SCOPED_TRACE(name);
    auto in = base();
    set(in.options);
    try {
      (void)key(in);
      ADD_FAILURE() << "accepted without extra_digest";
    } catch (const extra_digest_required& e) {
      EXPECT_TRUE(contains(e.what(), name)) << e.what();
    }
    in.extra_digest = "fingerprint";
    EXPECT_FALSE(key(in).includes().vouched.empty());
  }
}

TEST(ParseCodeType, IsCaseInsensitive) {
  EXPECT_EQ(parse_code_type("CUBIN"), code_type::cubin);
  EXPECT_EQ(parse_code_type("Ptx"), code_type::ptx);
  EXPECT_EQ(parse_code_type("ptx"), code_type::ptx);
  EXPECT_EQ(parse_code_type("LTOIR"), code_type::ltoir);
  EXPECT_EQ(parse_code_type("FatBin"), code_type::fatbin);
  EXPECT_THROW(parse_code_type("CUBINX"), invalid_argument);
  EXPECT_THROW(parse_code_type(""), invalid_argument);
}

TEST(MakeProgramCacheKey, NvvmUseLibdeviceNeedsExtraDigest) {
  auto in = base(source_type::nvvm);
  in.options.use_libdevice = true;
  auto msg = refusal(in);
  EXPECT_TRUE(contains(msg, "use_libdevice")) << msg;
  EXPECT_TRUE(contains(msg, "extra_digest")) << msg;
  EXPECT_TRUE(contains(msg, "libdevice_path")) << msg;
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
    auto msg = refusal(in);
    EXPECT_TRUE(contains(msg, "use_libdevice")) << msg;
  }
}

TEST(MakeProgramCacheKey, ExtraSourcesRefusedOutsideNvvm) {
  for (auto type : {source_type::cxx, source_type::ptx}) {
    auto in = base(type);
    in.options.extra_sources = {{"m", "x"}};
    in.extra_digest = "x";
    auto msg = refusal(in);
    EXPECT_TRUE(contains(msg, "extra_sources")) << msg;
    EXPECT_TRUE(contains(msg, "only supported for nvvm")) << msg;
    EXPECT_TRUE(contains(msg, "cucore::linker")) << msg;
  }
}

TEST(MakeProgramCacheKey, PtxRefusesNvrtcOnlyOptionsClearly) {
  // Unlike cuda.core (which ignores them), a ptx program refuses options its linker cannot take.
  auto in = base(source_type::ptx);
  in.options.include_path = {"/inc"};
  in.options.std = "c++17";
  in.extra_digest = "x";
  auto msg = refusal(in);
  EXPECT_TRUE(contains(msg, "include_path")) << msg;
  EXPECT_TRUE(contains(msg, "std")) << msg;
  EXPECT_TRUE(contains(msg, "PTX")) << msg;
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
  for (auto [name, set] :
       std::vector<std::pair<std::string, std::function<void(program_options&)>>>{
           {"time", [](program_options& o) { o.time = "t.csv"; }},
           {"ptxas_options", [](program_options& o) { o.ptxas_options = {"-v"}; }},
           {"split_compile", [](program_options& o) { o.split_compile = 0; }},
       }) {
    SCOPED_TRACE(name);
    auto in = base(source_type::ptx);
    set(in.options);
    auto msg = refusal(in, driver);
    EXPECT_TRUE(contains(msg, name)) << msg;
    EXPECT_TRUE(contains(msg, "nvJitLink")) << msg;
    EXPECT_NO_THROW((void)key(in)) << "accepted under nvJitLink";
    // A failed linker probe skips the driver rules: the key is tainted already.
    fixed_probes failed = kProbes;
    failed.linker_result = {false, linker_backend::driver, "", "library_not_found"};
    EXPECT_NO_THROW((void)key(in, failed));
  }
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
// The installed libraries

TEST(InstalledCompilerProbes, ReportTheLoadedLibraries) {
  const auto& probes = installed_compiler_probes();
  EXPECT_EQ(&probes, &installed_compiler_probes());
  const auto nvrtc = probes.nvrtc();
  if (toolkit::status(toolkit::library::nvrtc).found) {
    ASSERT_TRUE(nvrtc.ok) << nvrtc.value;
    EXPECT_TRUE(nvrtc.value.starts_with(toolkit::nvrtc_version().to_string() + ";release=V"))
        << nvrtc.value;
    EXPECT_TRUE(contains(nvrtc.value, ";build=CL-")) << nvrtc.value;
  } else {
    EXPECT_FALSE(nvrtc.ok);
    EXPECT_EQ(nvrtc.value, "library_not_found");
  }
  const auto nvvm = probes.nvvm();
  if (toolkit::status(toolkit::library::nvvm).found) {
    ASSERT_TRUE(nvvm.ok) << nvvm.value;
    const auto v = toolkit::nvvm_version();
    EXPECT_TRUE(nvvm.value.starts_with("lib=" + v.library.to_string() + ";ir=" + v.ir.to_string() +
                                       "." + v.debug_metadata.to_string() + ";release=V"))
        << nvvm.value;
    EXPECT_TRUE(contains(nvvm.value, ";build=CL-")) << nvvm.value;
  } else {
    EXPECT_FALSE(nvvm.ok);
  }
  const auto link = probes.linker();
  EXPECT_EQ(link.backend, linker::which_backend());
  if (link.backend == linker_backend::nvjitlink) {
    ASSERT_TRUE(link.ok) << link.failure;
    EXPECT_TRUE(link.version.starts_with(toolkit::nvjitlink_version().to_string() + ";release=V"))
        << link.version;
    EXPECT_FALSE(contains(link.version, "libcuda")) << "nvJitLink keys do not depend on the driver";
  } else if (toolkit::status(toolkit::library::driver).found) {
    ASSERT_TRUE(link.ok) << link.failure;
    EXPECT_TRUE(contains(link.version, ";file=libcuda")) << link.version;
  } else {
    EXPECT_FALSE(link.ok);
    EXPECT_EQ(link.failure, "library_not_found");
  }
  // Stable within the process.
  EXPECT_EQ(probes.nvrtc().value, nvrtc.value);
  EXPECT_EQ(probes.nvvm().value, nvvm.value);
  EXPECT_EQ(probes.linker().version, link.version);
}

// The probes are the only environment input: the installed probes' key equals the key of fixed
// probes holding the same values.
TEST(InstalledCompilerProbes, AreTheOnlyEnvironmentInput) {
  const auto& installed = installed_compiler_probes();
  fixed_probes copy;
  copy.nvrtc_result = installed.nvrtc();
  copy.nvvm_result = installed.nvvm();
  copy.linker_result = installed.linker();
  for (auto type : kAllTypes) {
    const auto in = base(type);
    EXPECT_EQ(make_program_cache_key(in), key(in, copy)) << type_name(type);
    EXPECT_EQ(make_program_cache_key(in), make_program_cache_key(in)) << type_name(type);
  }
}

// ---------------------------------------------------------------------------------------------
// Across processes

constexpr const char* kChildEnv = "CUCORE_KEY_TEST_CHILD_OUT";

std::string keys_for_cross_process_check() {
  std::string out;
  auto add = [&](const program_cache_key_inputs& in, const compiler_probes& p) {
    out += make_program_cache_key(in, p).hex() + "\n";
  };
  auto cxx = base();
  cxx.name_expressions = {"k2", "k1"};
  cxx.options.define_macro = {"A", macro{"B", "2"}};
  cxx.options.ftz = true;
  auto nvvm = base(source_type::nvvm);
  nvvm.options.extra_sources = {{"m", "x"}};
  for (const auto* in : {&cxx, &nvvm}) {
    add(*in, kProbes);
    add(*in, installed_compiler_probes());
  }
  add(base(source_type::ptx), kProbes);
  add(base(source_type::ptx), installed_compiler_probes());
  return out;
}

// Runs only in the child process started by SameKeyInAnotherProcess.
TEST(CacheKeyChildProcess, WriteKeys) {
  const char* path = std::getenv(kChildEnv);
  if (path == nullptr) GTEST_SKIP() << "helper of MakeProgramCacheKey.SameKeyInAnotherProcess";
  cucore::testing::write_text(path, keys_for_cross_process_check());
}

TEST(MakeProgramCacheKey, SameKeyInAnotherProcess) {
  temp_dir dir;
  const std::string out = (dir / "keys.txt").string();
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=CacheKeyChildProcess.WriteKeys";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, kChildEnv, std::strlen(kChildEnv)) != 0) env_strings.emplace_back(*e);
  }
  env_strings.push_back(std::string(kChildEnv) + "=" + out);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv = {exe.data(), filter.data(), nullptr};

  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  const std::string theirs = cucore::testing::read_text(out);
  EXPECT_FALSE(theirs.empty());
  EXPECT_EQ(theirs, keys_for_cross_process_check());
}

// ---------------------------------------------------------------------------------------------
// ptxas options that name files (issue 39): ptxas reads or writes them, the key does not walk
// them, so every spelling bypasses (option_file); ptxas's ordinary options do not.

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
  for (const source_type type : {source_type::cxx, source_type::ptx}) {
    for (const auto& options : naming) {
      SCOPED_TRACE(std::string(type_name(type)) + ": " + options.front());
      auto in = base(type);
      in.options.ptxas_options = options;
      const program_cache_key k = key(in);
      ASSERT_TRUE(k.bypass().has_value());
      EXPECT_EQ(k.bypass()->reason, cache_skip_reason::option_file);
      EXPECT_TRUE(contains(k.bypass()->why, "ptxas_options")) << k.bypass()->why;
      EXPECT_TRUE(contains(k.bypass()->why, "without the cache")) << k.bypass()->why;
    }
  }
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
  for (const source_type type : {source_type::cxx, source_type::ptx}) {
    for (const auto& options : ordinary) {
      SCOPED_TRACE(std::string(type_name(type)) + ": " + options.front());
      auto in = base(type);
      in.options.ptxas_options = options;
      const program_cache_key k = key(in);
      EXPECT_FALSE(k.bypass().has_value()) << k.bypass()->why;
    }
  }
}

}  // namespace
}  // namespace cucore
