// The context oracle's child: in the context it was started in (working directory, clock,
// environment, umask), derives the cache key of one compile and compiles it uncached, writing
//   KEY_FILE: the key's hex, then a line with the bypass reason ("-" for none)
//   OUT_FILE: the compiler's output
// Usage: context_compile SOURCE_FILE NAME TARGET KEY_FILE OUT_FILE [KIND] [OPTION...]
//   TARGET ptx|cubin|ltoir; KIND c++ (default), nvvm or ptx; OPTION: lineinfo, debug, or an
//   NVRTC option passed verbatim (extra_nvrtc_options). The source is read from SOURCE_FILE.
// Exit status: 0 done, 1 the compiler refused the code (the key file is still written), 2 other.
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "compile_tool.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::cerr << "usage: context_compile SOURCE NAME TARGET KEY_FILE OUT_FILE [KIND] [OPTION...]\n";
    return 2;
  }
  try {
    std::ifstream in(argv[1], std::ios::binary);
    const std::string code((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string target_name = argv[3];
    const cucore::code_type target = target_name == "ptx"     ? cucore::code_type::ptx
                                     : target_name == "ltoir" ? cucore::code_type::ltoir
                                                              : cucore::code_type::cubin;
    const std::string kind = argc > 6 ? argv[6] : "c++";
    const cucore::source_type type = kind == "nvvm"  ? cucore::source_type::nvvm
                                     : kind == "ptx" ? cucore::source_type::ptx
                                                     : cucore::source_type::cxx;
    cucore::program_options options;
    options.name = argv[2];
    options.arch = "sm_90";
    for (int i = 7; i < argc; ++i) {
      const std::string o = argv[i];
      if (o == "lineinfo") {
        options.lineinfo = true;
      } else if (o == "debug") {
        options.debug = true;
      } else {
        options.extra_nvrtc_options.push_back(o);
      }
    }
    cucore::program_cache_key_inputs inputs;
    inputs.code = code;
    inputs.code_type = type;
    inputs.options = options;
    inputs.target = target;
    const cucore::program_cache_key key = cucore::make_program_cache_key(inputs);
    {
      std::ofstream k(argv[4], std::ios::binary);
      k << key.hex() << '\n'
        << (key.bypass() ? std::string(cucore::to_string(key.bypass()->reason)) : "-") << '\n';
    }
    cucore::program program(code, type, options);
    cucore::oracle::write_code(argv[5], program.compile(target));
    return 0;
  } catch (...) {
    return cucore::oracle::tool_failure("context_compile");
  }
}
