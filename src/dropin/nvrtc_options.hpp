// The option strings a program gives nvrtcCompileProgram, as the drop-in's cache key sees them.
#pragma once

#include <string>
#include <vector>

#include "cucore/options.hpp"

namespace cucore::dropin {

struct parsed_nvrtc_options {
  // One element per option, in the program's order. The options program_options covers are
  // canonicalised (one spelling per option: "--gpu-architecture=sm_90" and "-arch=sm_90" are both
  // "-arch=sm_90"; "--include-path=D" and "-ID" are "-ID"); any other option is kept verbatim.
  std::vector<std::string> canonical;
  // What include tracking needs: include_path, pre_include, define_macro, undefine_macro,
  // no_source_include (and arch, when one is given), in the program's order.
  program_options fields;
  // The directories of --use-bundled-headers=DIR (absolute, without a trailing slash), in order:
  // NVRTC installs its bundled headers there and searches DIR and DIR/cccl at the option's place
  // (fields.include_path has both there).
  std::vector<std::string> bundled_headers;
  // Non-empty: the compile must bypass the cache, and why (an option with a side effect, one that
  // makes NVRTC read files the key cannot see, or one the drop-in cannot read unambiguously).
  std::string bypass;
  // The bypass is for an input the key cannot see (precompiled headers), not a side effect.
  bool bypass_needs_digest = false;
};

// Never throws for what the options say (bad_alloc aside): what it cannot read is a bypass.
parsed_nvrtc_options parse_nvrtc_options(int count, const char* const* options);

}  // namespace cucore::dropin
