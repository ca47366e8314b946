// The clock oracle's child (clock_oracle_test.cpp): under the clock it was started with (faketime),
// for each case of a batch derives the cache key and compiles the case UNCACHED, in one process.
// Usage: clock_compile BATCH.json RESULTS.json
//   BATCH.json: an array of oracle_case (oracle_case.hpp); each is compiled to its target with
//   automatic PCH off (a PCH built by one case is never reused by the next).
//   RESULTS.json: an array, one object per case: {"status": 0 compiled | 1 the compiler refused it
//   | 2 other, "bypass": the key's bypass reason or "-", "output": the compiled bytes (PTX text),
//   "store": the store gate's refusal reason for that output (check_store) or "stored",
//   "log": the compiler's log or the error}.
// The key is derived in the same process and environment as the compile, so NVRTC_APPEND_FLAGS
// (read when the compilers load) reaches both. Exit status: 0 done, 2 the batch could not be read.
#include <nlohmann/json.hpp>

#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "observe/compiler_observer.hpp"
#include "oracle_case.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: clock_compile BATCH.json RESULTS.json\n";
    return 2;
  }
  std::vector<cucore::oracle::oracle_case> cases;
  try {
    std::ifstream in(argv[1], std::ios::binary);
    cases = nlohmann::json::parse(in).get<std::vector<cucore::oracle::oracle_case>>();
  } catch (const std::exception& e) {
    std::cerr << "clock_compile: " << e.what() << '\n';
    return 2;
  }
  nlohmann::json results = nlohmann::json::array();
  for (const auto& c : cases) {
    nlohmann::json r = {{"status", 2}, {"bypass", "-"}, {"output", ""}, {"log", ""}};
    try {
      cucore::program_options options = cucore::oracle::options_of(c);
      options.auto_pch = false;
      cucore::program_cache_key_inputs inputs;
      inputs.code = c.code;
      inputs.code_type = cucore::source_type::cxx;
      inputs.options = options;
      inputs.target = cucore::oracle::target_of(c);
      const cucore::program_cache_key key = cucore::make_program_cache_key(inputs);
      r["bypass"] = key.bypass() ? std::string(cucore::to_string(key.bypass()->reason)) : "-";
      cucore::program program(c.code, cucore::source_type::cxx, options);
      cucore::detail::observed_inputs seen = cucore::detail::unobserved_compile();
      const cucore::object_code out = cucore::detail::run_observed(
          seen, [&] { return program.compile(cucore::oracle::target_of(c)); });
      const auto bytes = out.code();
      r["output"] = std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      // What the store gate says of this output: time_macros where it holds the clock's text
      // (asked first: under faketime the header identity checks refuse for their own reasons).
      const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      const auto refusal = key.check_store(seen, bytes);
      r["store"] = !cucore::detail::clock_in_output(seen, text).empty() ? "time_macros"
                   : refusal ? std::string(cucore::to_string(refusal->reason))
                             : "stored";
      r["status"] = 0;
    } catch (const cucore::compile_error& e) {
      r["status"] = 1;
      r["log"] = e.log();
    } catch (const std::exception& e) {
      r["log"] = e.what();
    }
    results.push_back(std::move(r));
  }
  std::ofstream(argv[2], std::ios::binary)
      << results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
