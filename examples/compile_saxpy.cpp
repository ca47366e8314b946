// Compiles examples/saxpy.cu to a cubin with the C++ API and prints the mangled names of two
// template instantiations. Usage: compile_saxpy [arch] (default: the GPU's, else sm_90).
#include <cucore/cucore.hpp>

#include "report_failure.hpp"
#include "saxpy_source.hpp"  // examples/saxpy.cu, embedded at build time (CMakeLists.txt)

#include <iostream>

int main(int argc, char** argv) try {
  cucore::program_options options;
  options.name = "saxpy.cu";
  options.arch = argc > 1 ? argv[1] : cucore::toolkit::current_device_arch().value_or("sm_90");
  options.std = "c++17";

  cucore::program program(saxpy_source, cucore::source_type::cxx, options);
  std::vector<std::string> names = {"saxpy<float>", "saxpy<double>"};
  cucore::object_code cubin = program.compile(cucore::code_type::cubin, names);

  std::cout << "compiled " << cubin.size() << " bytes of cubin for " << *options.arch << "\n";
  for (const auto& [expression, mangled] : cubin.symbol_mapping()) {
    std::cout << "  " << expression << " -> " << mangled << "\n";
  }
  return 0;
} catch (...) {
  return report_failure();
}
