// What the program cache key's tests (cache_key*_test.cpp) share: compiler identities the test
// chooses, a base input per code type, and readers of a key's fields and of its refusals.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "test_support.hpp"

namespace cucore::testing {

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

inline const fixed_probes kProbes;

inline constexpr std::string_view kCxx = "extern \"C\" __global__ void k(int* a) { *a = 1; }";
inline constexpr std::string_view kPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n";
inline constexpr std::string_view kNvvm =
    "target triple = \"nvptx64-nvidia-cuda\"\ndefine void @k() {\n  ret void\n}\n";

inline program_cache_key_inputs base(source_type type = source_type::cxx) {
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

inline program_cache_key key(const program_cache_key_inputs& in,
                             const compiler_probes& p = kProbes) {
  return make_program_cache_key(in, p);
}

// The message of the invalid_argument `f` throws (fails the test when it throws nothing).
inline std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected invalid_argument";
  return {};
}

inline std::string refusal(const program_cache_key_inputs& in, const compiler_probes& p = kProbes) {
  return refusal([&] { (void)make_program_cache_key(in, p); });
}

inline std::vector<std::string> labels(const program_cache_key& k) {
  std::vector<std::string> out;
  for (const auto& f : k.explain()) out.push_back(f.label);
  return out;
}

inline std::vector<std::string> payloads(const program_cache_key& k, std::string_view label) {
  std::vector<std::string> out;
  for (const auto& f : k.explain()) {
    if (f.label == label) out.push_back(f.payload);
  }
  return out;
}

// The code type's name ("c++", "ptx", "nvvm"), for failure messages.
inline std::string type_name(source_type t) {
  return std::string(to_string(t));
}

inline constexpr source_type kAllTypes[] = {source_type::cxx, source_type::ptx, source_type::nvvm};

}  // namespace cucore::testing
