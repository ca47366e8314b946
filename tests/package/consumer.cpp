// Uses the installed headers and library: compiles a kernel to PTX (no GPU needed).
#include <cucore/cucore.hpp>

#include <iostream>

int main() {
  cucore::program_options options;
  options.arch = "sm_80";
  cucore::program program("extern \"C\" __global__ void k(int* p) { *p = 1; }",
                          cucore::source_type::cxx, options);
  auto ptx = program.compile(cucore::code_type::ptx);
  if (ptx.text().find(".entry k") == std::string_view::npos) {
    std::cerr << "consumer: no .entry in the PTX\n";
    return 1;
  }
  std::cout << "consumer: compiled " << ptx.size() << " bytes of PTX\n";
  return 0;
}
