// make_program_cache_key and program_cache_key: the key type, and a key's determinism, framing and
// schema.
#include "cucore/cache/key.hpp"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <set>
#include <unordered_set>

#include "cache_key_test_support.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/toolkit.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // cache_key_test_support.hpp and the shared test helpers

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

}  // namespace
}  // namespace cucore
