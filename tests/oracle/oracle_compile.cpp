// The traced side of the differential oracle: compiles one oracle_case (a JSON file) with NVRTC,
// uncached, in the case's working directory, and nothing else: no cache key is derived and no
// header is looked at by cucore, so every header access the tracer sees is NVRTC's own.
// With --cache DIR (not traced): through a directory cache there instead, printing the outcome
// ("hit" or "miss") on standard output: a fresh process's view of a cache another process filled.
// Exit status: 0 compiled, 1 the compiler refused the code, 2 bad usage or any other error.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>

#include "compile_tool.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "observe/compiler_observer.hpp"
#include "oracle_case.hpp"

int main(int argc, char** argv) {
  std::string cache_dir;
  std::string observed_file;
  for (;;) {
    if (argc >= 3 && std::string(argv[1]) == "--cache") {
      cache_dir = argv[2];
    } else if (argc >= 3 && std::string(argv[1]) == "--observed") {
      observed_file = argv[2];
    } else {
      break;
    }
    argv += 2;
    argc -= 2;
  }
  if (argc != 2 && argc != 3) {
    std::cerr << "usage: oracle_compile [--cache DIR] [--observed FILE] CASE.json [OUTPUT]\n";
    return 2;
  }
  try {
    std::ifstream in(argv[1], std::ios::binary);
    const auto c = nlohmann::json::parse(in).get<cucore::oracle::oracle_case>();
    if (!c.cwd.empty() && ::chdir(c.cwd.c_str()) != 0) {
      std::perror("oracle_compile: chdir");
      return 2;
    }
    cucore::program program(c.code, cucore::source_type::cxx, cucore::oracle::options_of(c));
    std::optional<cucore::file_stream_program_cache> cache;
    if (!cache_dir.empty()) cache.emplace(cache_dir);
    // --observed FILE: what cucore's observation of the compile saw, a line per input ("CALL
    // FOUND PATH"), for the oracle to hold against the tracer's view.
    std::optional<cucore::detail::compiler_observation> watch;
    if (!observed_file.empty()) watch.emplace();
    const auto write_observed = [&] {
      if (!watch) return;
      std::ofstream file(observed_file);
      for (const auto& in : watch->finish().inputs) {
        file << cucore::detail::to_string(in.call) << ' ' << (in.found ? 1 : 0) << ' ' << in.name
             << '\n';
      }
    };
    std::optional<cucore::object_code> compiled;
    try {
      compiled = program.compile(cucore::oracle::target_of(c), c.name_expressions,
                                 cache ? &*cache : nullptr);
    } catch (const cucore::compile_error&) {
      write_observed();
      throw;
    }
    write_observed();
    const cucore::object_code& out = *compiled;
    if (cache) std::cout << cucore::to_string(program.last_cache_outcome()) << '\n';
    if (argc == 3) cucore::oracle::write_code(argv[2], out);
    return 0;
  } catch (...) {
    return cucore::oracle::tool_failure("oracle_compile");
  }
}
