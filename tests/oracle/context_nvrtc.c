/* The context oracle's program for `cucore run`: an unmodified NVRTC client. Loads
 * libnvrtc.so.13 by soname (under `cucore run`, the drop-in), compiles SOURCE_FILE named NAME
 * with the OPTIONs and writes the PTX to OUT_FILE. Usage: context_nvrtc SOURCE NAME OUT [OPT...] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*create_fn)(void**, const char*, const char*, int, const char* const*,
                         const char* const*);
typedef int (*compile_fn)(void*, int, const char* const*);
typedef int (*size_fn)(void*, size_t*);
typedef int (*get_fn)(void*, char*);

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: context_nvrtc SOURCE NAME OUT [OPTION...]\n");
    return 2;
  }
  void* lib = dlopen("libnvrtc.so.13", RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "context_nvrtc: %s\n", dlerror());
    return 2;
  }
  create_fn create = (create_fn)dlsym(lib, "nvrtcCreateProgram");
  compile_fn compile = (compile_fn)dlsym(lib, "nvrtcCompileProgram");
  size_fn ptx_size = (size_fn)dlsym(lib, "nvrtcGetPTXSize");
  get_fn ptx = (get_fn)dlsym(lib, "nvrtcGetPTX");
  FILE* in = fopen(argv[1], "rb");
  if (in == NULL || !create || !compile || !ptx_size || !ptx) return 2;
  static char source[1 << 20];
  const size_t n = fread(source, 1, sizeof source - 1, in);
  source[n] = '\0';
  fclose(in);
  void* prog = NULL;
  if (create(&prog, source, argv[2], 0, NULL, NULL) != 0) return 2;
  if (compile(prog, argc - 4, (const char* const*)(argv + 4)) != 0) return 1;
  size_t size = 0;
  if (ptx_size(prog, &size) != 0) return 2;
  char* out = malloc(size);
  if (out == NULL || ptx(prog, out) != 0) return 2;
  FILE* o = fopen(argv[3], "wb");
  if (o == NULL) return 2;
  fwrite(out, 1, size, o);
  fclose(o);
  free(out);
  return 0;
}
