/* The C harness of the NVRTC drop-in (docs/transparent-cache.md): calls NVRTC's C API through the
 * real libnvrtc.so.13 and through cucore's drop-in, both opened by path in this one process, on a
 * matrix of programs (headers in memory and on disk, name expressions, every target, failing
 * compiles, warnings, misuse), and compares every output byte for byte: each getter's return
 * code, size and bytes, the log, each lowered name, the PCH status. Each case compiles through
 * the real library once and through the drop-in twice (a fresh cache: miss then hit; a second
 * process over the same cache: hit and hit). tests/dropin/run_harness.sh checks the hit counts.
 *
 * NVRTC writes the process's PID into some internal symbol names
 * (/work/shared/design/nvrtc-observed.md): compared in one process, those bytes are equal.
 *
 * Usage: nvrtc_harness REAL_LIB DROPIN_LIB WORKDIR [cases|threads|misuse|edit|missing]
 * Prints one line per check and "N passed, N failed"; exits 1 when any failed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dl_support.h"

typedef int nvrtcResult;
typedef struct _nvrtcProgram* nvrtcProgram;

typedef struct {
  const char* (*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int*, int*);
  nvrtcResult (*GetNumSupportedArchs)(int*);
  nvrtcResult (*GetSupportedArchs)(int*);
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*);
  nvrtcResult (*DestroyProgram)(nvrtcProgram*);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*GetSize[5])(nvrtcProgram, size_t*);
  nvrtcResult (*Get[5])(nvrtcProgram, char*);
  nvrtcResult (*AddNameExpression)(nvrtcProgram, const char*);
  nvrtcResult (*GetLoweredName)(nvrtcProgram, const char*, const char**);
  nvrtcResult (*GetPCHCreateStatus)(nvrtcProgram);
  nvrtcResult (*GetPCHHeapSizeRequired)(nvrtcProgram, size_t*);
  nvrtcResult (*GetPCHHeapSize)(size_t*);
} api;

static const char* kOutputs[5] = {"PTX", "CUBIN", "LTOIR", "OptiXIR", "ProgramLog"};

static int passed = 0;
static int failed = 0;
static pthread_mutex_t report_mutex = PTHREAD_MUTEX_INITIALIZER;

static void check(int ok, const char* fmt, ...) {
  va_list args;
  pthread_mutex_lock(&report_mutex);
  va_start(args, fmt);
  printf(ok ? "ok: " : "FAILED: ");
  vprintf(fmt, args);
  printf("\n");
  va_end(args);
  if (ok) {
    ++passed;
  } else {
    ++failed;
  }
  fflush(stdout);
  pthread_mutex_unlock(&report_mutex);
}

static api load(const char* path) {
  void* lib = open_library(path);
  api a;
  *(void**)&a.GetErrorString = must_sym(lib, "nvrtcGetErrorString");
  *(void**)&a.Version = must_sym(lib, "nvrtcVersion");
  *(void**)&a.GetNumSupportedArchs = must_sym(lib, "nvrtcGetNumSupportedArchs");
  *(void**)&a.GetSupportedArchs = must_sym(lib, "nvrtcGetSupportedArchs");
  *(void**)&a.CreateProgram = must_sym(lib, "nvrtcCreateProgram");
  *(void**)&a.DestroyProgram = must_sym(lib, "nvrtcDestroyProgram");
  *(void**)&a.CompileProgram = must_sym(lib, "nvrtcCompileProgram");
  for (int i = 0; i < 5; ++i) {
    char name[64];
    snprintf(name, sizeof name, "nvrtcGet%sSize", kOutputs[i]);
    *(void**)&a.GetSize[i] = must_sym(lib, name);
    snprintf(name, sizeof name, "nvrtcGet%s", kOutputs[i]);
    *(void**)&a.Get[i] = must_sym(lib, name);
  }
  *(void**)&a.AddNameExpression = must_sym(lib, "nvrtcAddNameExpression");
  *(void**)&a.GetLoweredName = must_sym(lib, "nvrtcGetLoweredName");
  *(void**)&a.GetPCHCreateStatus = must_sym(lib, "nvrtcGetPCHCreateStatus");
  *(void**)&a.GetPCHHeapSizeRequired = must_sym(lib, "nvrtcGetPCHHeapSizeRequired");
  *(void**)&a.GetPCHHeapSize = must_sym(lib, "nvrtcGetPCHHeapSize");
  open_nvrtc_builtins(path, a.Version);
  return a;
}

/* --- one compile's every observable result ------------------------------------------------- */

#define MAX_NAMES 8

typedef struct {
  const char* label;
  const char* source;
  const char* name; /* may be NULL */
  int num_headers;
  const char* headers[4];
  const char* include_names[4];
  int num_options;
  const char* options[8];
  int num_names;
  const char* names[MAX_NAMES];
} program_case;

typedef struct {
  nvrtcResult create, compile;
  nvrtcResult size_code[5], get_code[5], null_size_code[5], null_get_code[5];
  size_t size[5];
  char* bytes[5];
  nvrtcResult add_code[MAX_NAMES];
  nvrtcResult lowered_code[MAX_NAMES];
  char* lowered[MAX_NAMES];
  nvrtcResult unknown_lowered_code, null_lowered_code, add_after_code;
  nvrtcResult pch_status, pch_required_code;
  size_t pch_required;
} result;

static void free_result(result* r) {
  for (int i = 0; i < 5; ++i) free(r->bytes[i]);
  for (int i = 0; i < MAX_NAMES; ++i) free(r->lowered[i]);
}

static result run_case(const api* a, const program_case* c) {
  result r;
  memset(&r, 0, sizeof r);
  nvrtcProgram prog = NULL;
  r.create = a->CreateProgram(&prog, c->source, c->name, c->num_headers,
                              c->num_headers ? c->headers : NULL,
                              c->num_headers ? c->include_names : NULL);
  if (r.create != 0) return r;
  for (int i = 0; i < c->num_names; ++i) r.add_code[i] = a->AddNameExpression(prog, c->names[i]);
  r.compile = a->CompileProgram(prog, c->num_options, c->options);
  for (int i = 0; i < 5; ++i) {
    r.size_code[i] = a->GetSize[i](prog, &r.size[i]);
    r.null_size_code[i] = a->GetSize[i](prog, NULL);
    r.null_get_code[i] = a->Get[i](prog, NULL);
    if (r.size_code[i] == 0) {
      r.bytes[i] = calloc(r.size[i] + 1, 1);
      r.get_code[i] = a->Get[i](prog, r.bytes[i]);
    } else {
      r.get_code[i] = -1;
    }
  }
  for (int i = 0; i < c->num_names; ++i) {
    const char* lowered = NULL;
    r.lowered_code[i] = a->GetLoweredName(prog, c->names[i], &lowered);
    if (r.lowered_code[i] == 0 && lowered) r.lowered[i] = strdup(lowered);
  }
  const char* ignored = NULL;
  r.unknown_lowered_code = a->GetLoweredName(prog, "no_such_expression<int>", &ignored);
  r.null_lowered_code = a->GetLoweredName(prog, NULL, &ignored);
  r.pch_status = a->GetPCHCreateStatus(prog);
  r.pch_required_code = a->GetPCHHeapSizeRequired(prog, &r.pch_required);
  r.add_after_code = a->AddNameExpression(prog, "late_expression");
  a->DestroyProgram(&prog);
  return r;
}

static int same_result(const char* label, const char* what, const result* x, const result* y) {
  int ok = 1;
#define SAME(field)                                                                \
  if (x->field != y->field) {                                                      \
    printf("  %s %s: " #field " %lld != %lld\n", label, what, (long long)x->field, \
           (long long)y->field);                                                   \
    ok = 0;                                                                        \
  }
  SAME(create);
  SAME(compile);
  for (int i = 0; i < 5; ++i) {
    SAME(size_code[i]);
    SAME(size[i]);
    SAME(get_code[i]);
    SAME(null_size_code[i]);
    SAME(null_get_code[i]);
    if (x->size_code[i] == 0 && x->size[i] == y->size[i] &&
        memcmp(x->bytes[i], y->bytes[i], x->size[i]) != 0) {
      printf("  %s %s: %s bytes differ\n", label, what, kOutputs[i]);
      ok = 0;
    }
    /* A log that differs is shown: it says why. */
    if (i == 4 && x->size_code[i] == 0 && y->size_code[i] == 0 &&
        (x->size[i] != y->size[i] || memcmp(x->bytes[i], y->bytes[i], x->size[i]) != 0)) {
      printf("  %s %s: log \"%s\" against \"%s\"\n", label, what, (const char*)x->bytes[i],
             (const char*)y->bytes[i]);
    }
  }
  for (int i = 0; i < MAX_NAMES; ++i) {
    SAME(add_code[i]);
    SAME(lowered_code[i]);
    if ((x->lowered[i] == NULL) != (y->lowered[i] == NULL) ||
        (x->lowered[i] && strcmp(x->lowered[i], y->lowered[i]) != 0)) {
      printf("  %s %s: lowered name %d differs\n", label, what, i);
      ok = 0;
    }
  }
  SAME(unknown_lowered_code);
  SAME(null_lowered_code);
  SAME(add_after_code);
  SAME(pch_status);
  SAME(pch_required_code);
  SAME(pch_required);
#undef SAME
  return ok;
}

/* --- the matrix ------------------------------------------------------------------------------- */

static const char kSaxpy[] =
    "extern \"C\" __global__ void saxpy(float a, const float* x, float* y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

static const char kTemplates[] =
    "template <typename T> __global__ void scale(T* p, T s) { p[threadIdx.x] *= s; }\n"
    "template <int N> __device__ int twice_var = 2 * N;\n"
    "__global__ void use(int* out) { out[0] = twice_var<21>; }\n";

static const char kMemoryHeader[] =
    "#include \"tuning.cuh\"\n"
    "#include <config/block.h>\n"
    "extern \"C\" __global__ void fill(int* p) { p[threadIdx.x] = kValue * BLOCK; }\n";

static const char kDiskHeader[] =
    "#include \"local.cuh\"\n"
    "#include <shared/value.cuh>\n"
    "extern \"C\" __global__ void k(int* p) { p[0] = local_value() + shared_value(); }\n";

static const char kWarning[] =
    "extern \"C\" __global__ void w(int* p) { int unused = 3; p[0] = 1; }\n";

static const char kError[] =
    "extern \"C\" __global__ void broken(int* p) { p[0] = undefined_name; }\n";

static const char kOptix[] = "extern \"C\" __device__ int optix_helper(int x) { return x + 1; }\n";

static char workdir[4096];
static char include_option[4200];
static char disk_program_name[4200];

static void write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(2);
  }
  fputs(text, f);
  fclose(f);
}

static void make_disk_headers(const char* shared_value) {
  char path[4400];
  snprintf(path, sizeof path, "%s/inc", workdir);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/inc/shared", workdir);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/inc/shared/value.cuh", workdir);
  write_file(path, shared_value);
  snprintf(path, sizeof path, "%s/local.cuh", workdir);
  write_file(path, "__device__ int local_value() { return 7; }\n");
  snprintf(include_option, sizeof include_option, "-I%s/inc", workdir);
  snprintf(disk_program_name, sizeof disk_program_name, "%s/disk_program.cu", workdir);
}

static int make_cases(program_case* cases) {
  int n = 0;
  program_case c;
#define BEGIN(text, src)   \
  memset(&c, 0, sizeof c); \
  c.label = text;          \
  c.source = src;          \
  c.name = "harness.cu";
#define OPT(o) c.options[c.num_options++] = o;
#define NAME(e) c.names[c.num_names++] = e;
#define END cases[n++] = c;

  BEGIN("cubin sm_90", kSaxpy) OPT("-arch=sm_90") END;
  BEGIN("cubin sm_90 alias spelling", kSaxpy) OPT("--gpu-architecture=sm_90") END;
  BEGIN("ptx compute_90", kSaxpy) OPT("-arch=compute_90") END;
  BEGIN("ltoir sm_90 -dlto", kSaxpy) OPT("-arch=sm_90") OPT("-dlto") END;
  BEGIN("default arch, no options, NULL name", kSaxpy) c.name = NULL;
  END;
  BEGIN("optix-ir", kOptix) OPT("-arch=compute_90") OPT("--optix-ir") END;
  BEGIN("debug and line info", kSaxpy) OPT("-arch=sm_90") OPT("-G") OPT("-lineinfo") END;
  BEGIN("name expressions", kTemplates)
  OPT("-arch=sm_90")
  NAME("scale<float>") NAME("scale<int>") NAME("&twice_var<21>") NAME("scale<float>") END;
  BEGIN("in-memory headers", kMemoryHeader) OPT("-arch=sm_90") OPT("-DBLOCK=4") c.num_headers = 2;
  c.headers[0] = "constexpr int kValue = 5;\n";
  c.include_names[0] = "tuning.cuh";
  c.headers[1] = "#pragma once\n";
  c.include_names[1] = "config/block.h";
  END;
  BEGIN("headers on disk", kDiskHeader) c.name = disk_program_name;
  OPT("-arch=sm_90") OPT(include_option) END;
  BEGIN("warning in the log", kWarning) OPT("-arch=sm_90") END;
  BEGIN("failing compile", kError) OPT("-arch=sm_90") END;
  BEGIN("unknown option (fails)", kSaxpy) OPT("-arch=sm_90") OPT("--no-such-option") END;
  BEGIN("fast math, std", kSaxpy) OPT("-arch=sm_80") OPT("--use_fast_math") OPT("-std=c++17") END;
#undef BEGIN
#undef OPT
#undef NAME
#undef END
  return n;
}

/* The cases the drop-in caches (successful compiles without side effects). */
static int cacheable(const result* r) {
  return r->create == 0 && r->compile == 0;
}

static int run_cases(const api* real, const api* dropin) {
  program_case cases[32];
  const int n = make_cases(cases);
  int cached = 0;
  for (int i = 0; i < n; ++i) {
    result want = run_case(real, &cases[i]);
    result first = run_case(dropin, &cases[i]);
    result second = run_case(dropin, &cases[i]);
    check(same_result(cases[i].label, "first", &want, &first), "%s: first compile equals NVRTC's",
          cases[i].label);
    check(same_result(cases[i].label, "second", &want, &second),
          "%s: second compile equals NVRTC's", cases[i].label);
    if (cacheable(&want)) ++cached;
    free_result(&want);
    free_result(&first);
    free_result(&second);
  }
  printf("cacheable cases: %d\n", cached);
  return cached;
}

/* A header on disk edited between two compiles: the drop-in must compile the new contents. */
static void run_edit(const api* real, const api* dropin) {
  program_case cases[32];
  make_cases(cases);
  const program_case* disk = NULL;
  for (int i = 0; cases[i].label; ++i) {
    if (strcmp(cases[i].label, "headers on disk") == 0) {
      disk = &cases[i];
      break;
    }
  }
  char path[4400];
  snprintf(path, sizeof path, "%s/inc/shared/value.cuh", workdir);
  write_file(path, "__device__ int shared_value() { return 1000; }\n");
  result want = run_case(real, disk);
  result got = run_case(dropin, disk);
  check(same_result("edited header", "after edit", &want, &got),
        "an edited header on disk is compiled anew (equals NVRTC's)");
  free_result(&want);
  free_result(&got);
}

/* Misuse: the drop-in answers exactly the real library's return codes. */
static void run_misuse(const api* real, const api* dropin) {
  const api* both[2] = {real, dropin};
  nvrtcResult codes[2][12];
  for (int k = 0; k < 2; ++k) {
    const api* a = both[k];
    nvrtcProgram prog = NULL;
    size_t size = 0;
    const char* lowered = NULL;
    int i = 0;
    codes[k][i++] = a->CreateProgram(NULL, kSaxpy, "x.cu", 0, NULL, NULL);
    codes[k][i++] = a->CreateProgram(&prog, NULL, "x.cu", 0, NULL, NULL);
    codes[k][i++] = a->CompileProgram(NULL, 0, NULL);
    codes[k][i++] = a->GetSize[0](NULL, &size);
    codes[k][i++] = a->DestroyProgram(NULL);
    codes[k][i++] = a->GetLoweredName(NULL, "x", &lowered);
    codes[k][i++] = a->CreateProgram(&prog, kSaxpy, "x.cu", 0, NULL, NULL);
    codes[k][i++] = a->GetLoweredName(prog, "x", &lowered); /* before compile */
    codes[k][i++] = a->GetSize[1](prog, &size);             /* before compile */
    const char* bad_option[] = {NULL};
    codes[k][i++] = a->CompileProgram(prog, 1, bad_option);
    codes[k][i++] = a->DestroyProgram(&prog);
    codes[k][i++] = a->CreateProgram(&prog, kSaxpy, "x.cu", -1, NULL, NULL);
    if (codes[k][i - 1] == 0) a->DestroyProgram(&prog);
  }
  for (int i = 0; i < 12; ++i) {
    check(codes[0][i] == codes[1][i], "misuse call %d: NVRTC %d, drop-in %d", i, codes[0][i],
          codes[1][i]);
  }
  int major[2], minor[2];
  real->Version(&major[0], &minor[0]);
  dropin->Version(&major[1], &minor[1]);
  check(major[0] == major[1] && minor[0] == minor[1], "nvrtcVersion forwarded (%d.%d)", major[1],
        minor[1]);
  int count[2];
  real->GetNumSupportedArchs(&count[0]);
  dropin->GetNumSupportedArchs(&count[1]);
  check(count[0] == count[1], "nvrtcGetNumSupportedArchs forwarded (%d)", count[1]);
  check(strcmp(real->GetErrorString(6), dropin->GetErrorString(6)) == 0,
        "nvrtcGetErrorString forwarded");
}

/* Many threads compiling at once through the drop-in, each program compared with NVRTC's. */
typedef struct {
  const api* real;
  const api* dropin;
  int index;
} thread_arg;

static void* thread_main(void* p) {
  const thread_arg* t = p;
  char source[512];
  /* Four distinct programs, each compiled by several threads at once. */
  snprintf(source, sizeof source,
           "extern \"C\" __global__ void k%d(int* p) { p[threadIdx.x] = %d; }\n", t->index % 4,
           t->index % 4);
  program_case c;
  memset(&c, 0, sizeof c);
  c.label = "thread";
  c.source = source;
  c.name = "thread.cu";
  c.options[c.num_options++] = "-arch=sm_90";
  for (int round = 0; round < 3; ++round) {
    result want = run_case(t->real, &c);
    result got = run_case(t->dropin, &c);
    check(same_result("thread", "compile", &want, &got), "thread %d round %d equals NVRTC's",
          t->index, round);
    free_result(&want);
    free_result(&got);
  }
  return NULL;
}

static void run_threads(const api* real, const api* dropin) {
  enum { kThreads = 8 };
  pthread_t threads[kThreads];
  thread_arg args[kThreads];
  for (int i = 0; i < kThreads; ++i) {
    args[i] = (thread_arg){real, dropin, i};
    pthread_create(&threads[i], NULL, thread_main, &args[i]);
  }
  for (int i = 0; i < kThreads; ++i) pthread_join(threads[i], NULL);
}

/* No real library behind the drop-in (CUCORE_RUN_NVRTC names no file): every call fails. */
static void run_missing(const api* dropin) {
  int major = 0, minor = 0;
  for (int i = 0; i < 3; ++i) {
    check(dropin->Version(&major, &minor) != 0, "nvrtcVersion fails without a real library");
  }
  nvrtcProgram prog = NULL;
  check(dropin->CreateProgram(&prog, kSaxpy, "x.cu", 0, NULL, NULL) != 0,
        "nvrtcCreateProgram fails without a real library");
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s REAL_LIB DROPIN_LIB WORKDIR [cases|threads|misuse|edit]\n", argv[0]);
    return 2;
  }
  snprintf(workdir, sizeof workdir, "%s", argv[3]);
  const char* mode = argc > 4 ? argv[4] : "cases";
  make_disk_headers("__device__ int shared_value() { return 35; }\n");
  api dropin = load(argv[2]);
  if (strcmp(mode, "missing") == 0) {
    run_missing(&dropin);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
  }
  api real = load(argv[1]);
  if (strcmp(mode, "cases") == 0) {
    run_cases(&real, &dropin);
  } else if (strcmp(mode, "threads") == 0) {
    run_threads(&real, &dropin);
  } else if (strcmp(mode, "misuse") == 0) {
    run_misuse(&real, &dropin);
  } else if (strcmp(mode, "edit") == 0) {
    run_edit(&real, &dropin);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
