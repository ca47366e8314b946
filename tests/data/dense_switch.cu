// A dense switch: NVRTC lowers it to a branch tree by default and to a jump table (brx.idx) under
// -jtd=0. The option tests compile it (tests/unit/program_test.cpp, cli_compile_options_test.cpp,
// tests/python/test_program.py).
extern "C" __global__ void k(int* p, int s) {
  int v;
  switch (s) {
    case 0: v = 11; break; case 1: v = 23; break; case 2: v = 37; break; case 3: v = 41; break;
    case 4: v = 53; break; case 5: v = 67; break; case 6: v = 71; break; case 7: v = 89; break;
    default: v = 0;
  }
  p[v] = s;
}
