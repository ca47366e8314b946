// libFuzzer target for make_program_cache_key on arbitrary C++ code, which runs the scan for
// #include / __has_include of files the key cannot see over user input. Any code must give a key
// or an invalid_argument (naming the program's line), never a crash; the key is a
// function of the inputs; and with an extra_digest (the answer to that refusal) every code gets a
// key.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"

namespace {

class fixed_probes final : public cucore::compiler_probes {
 public:
  cucore::version_probe nvrtc() const override { return {true, "13.0"}; }
  cucore::version_probe nvvm() const override { return {true, "lib=2.0;ir=2.0.3.2"}; }
  cucore::linker_probe linker() const override {
    return {true, cucore::linker_backend::nvjitlink, "13.0", ""};
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fixed_probes probes;
  const std::string code(reinterpret_cast<const char*>(data), size);
  cucore::program_cache_key_inputs in;
  in.code = code;
  in.options.arch = "sm_90";
  in.target = cucore::code_type::cubin;
  try {
    const auto key = cucore::make_program_cache_key(in, probes);
    if (cucore::make_program_cache_key(in, probes) != key) std::abort();
  } catch (const cucore::invalid_argument& e) {
    const std::string_view message = e.what();
    if (message.find("extra_digest") == std::string_view::npos) {
      // The only other refusals code can cause: empty code, or a NUL byte (code is text).
      if (!code.empty() && code.find('\0') == std::string::npos) std::abort();
      return 0;
    }
    // The refusal names where: "the program:LINE:", or "FILE:LINE:" for a header reached.
    bool located = false;
    for (std::size_t i = message.find(':'); i != std::string_view::npos && !located;
         i = message.find(':', i + 1)) {
      std::size_t j = i + 1;
      while (j < message.size() && message[j] >= '0' && message[j] <= '9') ++j;
      located = j > i + 1 && j < message.size() && message[j] == ':';
    }
    if (!located) std::abort();
    in.extra_digest = "headers";
    (void)cucore::make_program_cache_key(in, probes);  // must not throw
  }
  return 0;
}
