/* Issue 39's four classes of stale cache hits, as a program spells them (tests/dropin/
 * run_stale_classes.sh runs it under `cucore run` and against the real library): one NVRTC
 * compile of the case named, through the library opened by path (the real libnvrtc or the
 * drop-in, as tests/dropin/nvrtc_harness.c opens them).
 *
 * Usage: stale_classes LIB CASE [FILE]
 *   clock_D, clock_define_macro, clock_D_split: -DSTAMP=__TIME__ in its three spellings (PTX)
 *   clock_paste, clock_paste_param: __TIME__ formed by ## (CAT(__TI,ME__), T(TIME)) (PTX)
 *   optf_X, optf_X_short, optf_ptxas_options: a ptxas options file FILE through
 *     -Xptxas=--options-file=, -Xptxas=-optf=, --ptxas-options=--options-file= (cubin)
 *   procfs: #include "/proc/sys/kernel/ostype" (PTX)
 *   stdin_dev, stdin_fd: __has_include and #include of "/dev/stdin", "/proc/self/fd/0" (PTX)
 * Prints "compile N", then "ptx SIZE" and the PTX, or "cubin SIZE HASH", then "log SIZE" and the
 * log. Exits 0 when every call was made (whatever nvrtcCompileProgram returned), 2 otherwise. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dl_support.h"

typedef int nvrtcResult;
typedef struct _nvrtcProgram* nvrtcProgram;

static nvrtcResult (*Version)(int*, int*);
static nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int,
                                    const char* const*, const char* const*);
static nvrtcResult (*DestroyProgram)(nvrtcProgram*);
static nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*);
static nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t*);
static nvrtcResult (*GetPTX)(nvrtcProgram, char*);
static nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*);
static nvrtcResult (*GetCUBIN)(nvrtcProgram, char*);
static nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*);
static nvrtcResult (*GetProgramLog)(nvrtcProgram, char*);

static void load(const char* path) {
  void* lib = open_library(path);
  *(void**)&Version = must_sym(lib, "nvrtcVersion");
  *(void**)&CreateProgram = must_sym(lib, "nvrtcCreateProgram");
  *(void**)&DestroyProgram = must_sym(lib, "nvrtcDestroyProgram");
  *(void**)&CompileProgram = must_sym(lib, "nvrtcCompileProgram");
  *(void**)&GetPTXSize = must_sym(lib, "nvrtcGetPTXSize");
  *(void**)&GetPTX = must_sym(lib, "nvrtcGetPTX");
  *(void**)&GetCUBINSize = must_sym(lib, "nvrtcGetCUBINSize");
  *(void**)&GetCUBIN = must_sym(lib, "nvrtcGetCUBIN");
  *(void**)&GetProgramLogSize = must_sym(lib, "nvrtcGetProgramLogSize");
  *(void**)&GetProgramLog = must_sym(lib, "nvrtcGetProgramLog");
  open_nvrtc_builtins(path, Version);
}

/* The time string lands in the PTX as the bytes of s[] (and nowhere else: the kernel reads it at
 * an index known only at run time, so no byte of it is folded into an instruction). */
#define STAMP_KERNEL                                          \
  "extern \"C\" __global__ void k(char* out, unsigned i) {\n" \
  "  out[0] = s[i % sizeof(s)];\n"                            \
  "}\n"
static const char kStampSource[] = "__device__ const char s[] = STAMP;\n" STAMP_KERNEL;
static const char kPasteSource[] =
    "#define CAT(a, b) a##b\n"
    "__device__ const char s[] = CAT(__TI, ME__);\n" STAMP_KERNEL;
static const char kPasteParamSource[] =
    "#define T(x) __##x##__\n"
    "__device__ const char s[] = T(TIME);\n" STAMP_KERNEL;
/* Register-hungry enough that --maxrregcount changes the cubin (spills). */
static const char kRegisterSource[] =
    "extern \"C\" __global__ void k(float* out, const float* in, int n) {\n"
    "  float acc[32];\n"
    "  #pragma unroll\n"
    "  for (int j = 0; j < 32; ++j) acc[j] = in[threadIdx.x + j * n];\n"
    "  for (int i = 0; i < n; ++i) {\n"
    "    #pragma unroll\n"
    "    for (int j = 0; j < 32; ++j) acc[j] = acc[j] * acc[(j + 7) % 32] + in[i + j];\n"
    "  }\n"
    "  float sum = 0.f;\n"
    "  #pragma unroll\n"
    "  for (int j = 0; j < 32; ++j) sum += acc[j] * (float)(j + 1);\n"
    "  out[threadIdx.x] = sum;\n"
    "}\n";
static const char kProcfsSource[] =
    "__device__ int\n"
    "#include \"/proc/sys/kernel/ostype\"\n"
    "= 1;\n";
static const char kStdinDevSource[] =
    "#if __has_include(\"/dev/stdin\")\n"
    "#include \"/dev/stdin\"\n"
    "__device__ int stdin_is_there = 1;\n"
    "#else\n"
    "__device__ int stdin_is_not_there = 1;\n"
    "#endif\n";
static const char kStdinFdSource[] =
    "#if __has_include(\"/proc/self/fd/0\")\n"
    "#include \"/proc/self/fd/0\"\n"
    "__device__ int fd0_is_there = 1;\n"
    "#else\n"
    "__device__ int fd0_is_not_there = 1;\n"
    "#endif\n";

static uint64_t fnv1a(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: stale_classes LIB CASE [FILE]\n");
    return 2;
  }
  const char* which = argv[2];
  const char* file = argc > 3 ? argv[3] : "";
  char option[4200];
  const char* source = NULL;
  const char* options[4] = {"-arch=sm_90"};
  int num_options = 1;
  int cubin = 0;
  if (strcmp(which, "clock_D") == 0) {
    source = kStampSource;
    options[num_options++] = "-DSTAMP=__TIME__";
  } else if (strcmp(which, "clock_define_macro") == 0) {
    source = kStampSource;
    options[num_options++] = "--define-macro=STAMP=__TIME__";
  } else if (strcmp(which, "clock_D_split") == 0) {
    source = kStampSource;
    options[num_options++] = "-D";
    options[num_options++] = "STAMP=__TIME__";
  } else if (strcmp(which, "clock_paste") == 0) {
    source = kPasteSource;
  } else if (strcmp(which, "clock_paste_param") == 0) {
    source = kPasteParamSource;
  } else if (strcmp(which, "optf_X") == 0 || strcmp(which, "optf_X_short") == 0 ||
             strcmp(which, "optf_ptxas_options") == 0) {
    const char* spelling = strcmp(which, "optf_X") == 0         ? "-Xptxas=--options-file="
                           : strcmp(which, "optf_X_short") == 0 ? "-Xptxas=-optf="
                                                                : "--ptxas-options=--options-file=";
    snprintf(option, sizeof option, "%s%s", spelling, file);
    source = kRegisterSource;
    options[num_options++] = option;
    cubin = 1;
  } else if (strcmp(which, "procfs") == 0) {
    source = kProcfsSource;
  } else if (strcmp(which, "stdin_dev") == 0) {
    source = kStdinDevSource;
  } else if (strcmp(which, "stdin_fd") == 0) {
    source = kStdinFdSource;
  } else {
    fprintf(stderr, "unknown case %s\n", which);
    return 2;
  }
  load(argv[1]);
  nvrtcProgram prog = NULL;
  if (CreateProgram(&prog, source, "stale.cu", 0, NULL, NULL) != 0) {
    fprintf(stderr, "nvrtcCreateProgram failed\n");
    return 2;
  }
  nvrtcResult rc = CompileProgram(prog, num_options, options);
  printf("compile %d\n", rc);
  size_t size = 0;
  if (rc == 0) {
    if (cubin) {
      if (GetCUBINSize(prog, &size) != 0) return 2;
      unsigned char* bytes = malloc(size ? size : 1);
      if (bytes == NULL || GetCUBIN(prog, (char*)bytes) != 0) return 2;
      printf("cubin %zu %016llx\n", size, (unsigned long long)fnv1a(bytes, size));
      free(bytes);
    } else {
      if (GetPTXSize(prog, &size) != 0) return 2;
      char* ptx = malloc(size ? size : 1);
      if (ptx == NULL || GetPTX(prog, ptx) != 0) return 2;
      printf("ptx %zu\n%s\n", size, ptx);
      free(ptx);
    }
  }
  if (GetProgramLogSize(prog, &size) != 0) return 2;
  char* log = malloc(size ? size : 1);
  if (log == NULL || GetProgramLog(prog, log) != 0) return 2;
  printf("log %zu\n%s\n", size, log);
  free(log);
  DestroyProgram(&prog);
  return 0;
}
