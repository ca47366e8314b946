// How the examples end when something throws: a compile error prints the compiler's log, any other
// exception its message. Called from main's handler: `} catch (...) { return report_failure(); }`.
#pragma once

#include <cucore/cucore.hpp>

#include <exception>
#include <iostream>

// The exit status of a failed example (1), having said why on stderr.
inline int report_failure() {
  try {
    throw;
  } catch (const cucore::compile_error& e) {
    std::cerr << e.log() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 1;
}
