// What the oracles' compile tools (oracle_compile, context_compile: separate processes the tests
// run) share: writing the code they compiled, and how they end when something throws.
#pragma once

#include <exception>
#include <fstream>
#include <iostream>

#include "cucore/error.hpp"
#include "cucore/object_code.hpp"

namespace cucore::oracle {

// The code's bytes as the file at `path`.
inline void write_code(const char* path, const object_code& code) {
  std::ofstream file(path, std::ios::binary);
  const auto bytes = code.code();
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// Called from a tool's handler: a compile error's log and exit status 1, anything else's message
// after the tool's name and 2.
inline int tool_failure(const char* tool) {
  try {
    throw;
  } catch (const compile_error& e) {
    std::cerr << e.log() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << tool << ": " << e.what() << '\n';
    return 2;
  }
}

}  // namespace cucore::oracle
