/* The C harness of the nvJitLink and libNVVM drop-ins (docs/transparent-cache.md): calls each C API
 * through the real library and through cucore's drop-in, both opened by path in this one process,
 * on a matrix (PTX, LTO-IR, a file, logs, failing links; one and two NVVM modules, lazy modules,
 * LTO-IR out, invalid IR), and compares every getter's return code, size and bytes. Each case runs
 * once through the real library and twice through the drop-in (tests/dropin/run_link_harness.sh
 * runs two processes over one cache and counts the hits).
 *
 * Usage: link_harness nvjitlink REAL_NVJITLINK DROPIN_NVJITLINK REAL_NVRTC WORKDIR
 *        link_harness nvvm REAL_NVVM DROPIN_NVVM DATA_DIR
 * Prints one line per check and "N passed, N failed"; exits 1 when any failed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dl_support.h"

static int passed = 0;
static int failed = 0;

static void check(int ok, const char* what, const char* label) {
  printf("%s: %s: %s\n", ok ? "ok" : "FAILED", label, what);
  if (ok) {
    ++passed;
  } else {
    ++failed;
  }
}

/* One output as a getter pair reports it. */
typedef struct {
  int size_code, get_code, null_size_code;
  size_t size;
  char* bytes;
} output;

typedef int (*size_fn)(void*, size_t*);
typedef int (*get_fn)(void*, void*);

/* null_probe: also ask the size with a NULL pointer (libNVVM crashes on that: not for it). */
static output read_output(void* handle, size_fn size, get_fn get, int null_probe) {
  output o;
  memset(&o, 0, sizeof o);
  o.size_code = size(handle, &o.size);
  if (null_probe) o.null_size_code = size(handle, NULL);
  if (o.size_code == 0) {
    o.bytes = calloc(o.size + 1, 1);
    o.get_code = get(handle, o.bytes);
  } else {
    o.get_code = -1;
  }
  return o;
}

static int same_output(const output* a, const output* b) {
  return a->size_code == b->size_code && a->get_code == b->get_code &&
         a->null_size_code == b->null_size_code && a->size == b->size &&
         (a->bytes == NULL || b->bytes == NULL || memcmp(a->bytes, b->bytes, a->size) == 0) &&
         ((a->bytes == NULL) == (b->bytes == NULL));
}

static void print_output(const char* who, const output* o) {
  printf("  %s: size code %d, size %zu, get code %d: %.*s\n", who, o->size_code, o->size,
         o->get_code, o->bytes ? (int)(o->size < 300 ? o->size : 300) : 0,
         o->bytes ? o->bytes : "");
}

typedef struct {
  int create, add[4], complete;
  output out[4];
} run_result;

/* The text without its "... time = N ms" lines (ptxas's -verbose timings differ run to run). */
static char* without_timings(const output* o) {
  char* out = calloc(o->size + 1, 1);
  size_t n = 0;
  for (size_t at = 0; at < o->size;) {
    const char* line = o->bytes + at;
    const char* end = memchr(line, '\n', o->size - at);
    size_t len = end ? (size_t)(end - line) + 1 : o->size - at;
    char* copy = strndup(line, len);
    if (strstr(copy, "time = ") == NULL) {
      memcpy(out + n, line, len);
      n += len;
    }
    free(copy);
    at += len;
  }
  return out;
}

static int same_text_but_timings(const output* a, const output* b) {
  if (a->size_code != b->size_code || a->get_code != b->get_code) return 0;
  if (a->bytes == NULL || b->bytes == NULL) return a->bytes == b->bytes;
  char* x = without_timings(a);
  char* y = without_timings(b);
  const int same = strcmp(x, y) == 0;
  free(x);
  free(y);
  return same;
}

static int same_run(const run_result* a, const run_result* b, int timed_log) {
  if (a->create != b->create || a->complete != b->complete) return 0;
  for (int i = 0; i < 4; ++i) {
    if (a->add[i] != b->add[i]) return 0;
    const int ok = timed_log && i == 3 ? same_text_but_timings(&a->out[i], &b->out[i])
                                       : same_output(&a->out[i], &b->out[i]);
    if (!ok) {
      print_output("want", &a->out[i]);
      print_output("got", &b->out[i]);
      return 0;
    }
  }
  return 1;
}

static void free_run(run_result* r) {
  for (int i = 0; i < 4; ++i) free(r->out[i].bytes);
}

/* --- nvJitLink ------------------------------------------------------------------------------- */

typedef struct {
  int (*Create)(void**, uint32_t, const char**);
  int (*Destroy)(void**);
  int (*AddData)(void*, int, const void*, size_t, const char*);
  int (*AddFile)(void*, int, const char*);
  int (*Complete)(void*);
  size_fn size[4];
  get_fn get[4];
} jitlink_api;

static jitlink_api load_jitlink(const char* path) {
  void* lib = open_library(path);
  jitlink_api a;
  static const char* sizes[4] = {
      "__nvJitLinkGetLinkedCubinSize_13_0", "__nvJitLinkGetLinkedPtxSize_13_0",
      "__nvJitLinkGetErrorLogSize_13_0", "__nvJitLinkGetInfoLogSize_13_0"};
  static const char* gets[4] = {"__nvJitLinkGetLinkedCubin_13_0", "__nvJitLinkGetLinkedPtx_13_0",
                                "__nvJitLinkGetErrorLog_13_0", "__nvJitLinkGetInfoLog_13_0"};
  *(void**)&a.Create = must_sym(lib, "__nvJitLinkCreate_13_0");
  *(void**)&a.Destroy = must_sym(lib, "__nvJitLinkDestroy_13_0");
  *(void**)&a.AddData = must_sym(lib, "__nvJitLinkAddData_13_0");
  *(void**)&a.AddFile = must_sym(lib, "__nvJitLinkAddFile_13_0");
  *(void**)&a.Complete = must_sym(lib, "__nvJitLinkComplete_13_0");
  for (int i = 0; i < 4; ++i) {
    *(void**)&a.size[i] = must_sym(lib, sizes[i]);
    *(void**)&a.get[i] = must_sym(lib, gets[i]);
  }
  return a;
}

typedef struct {
  const char* label;
  int num_options;
  const char* options[4];
  int num_inputs;
  int type[4]; /* NVJITLINK_INPUT_*: 2 PTX, 3 LTO-IR */
  const char* data[4];
  size_t size[4];
  const char* file[4]; /* AddFile instead of AddData when set */
} link_case;

static run_result run_link(const jitlink_api* a, const link_case* c) {
  run_result r;
  memset(&r, 0, sizeof r);
  void* handle = NULL;
  r.create = a->Create(&handle, (uint32_t)c->num_options, (const char**)c->options);
  if (r.create != 0) return r;
  for (int i = 0; i < c->num_inputs; ++i) {
    r.add[i] = c->file[i] ? a->AddFile(handle, c->type[i], c->file[i])
                          : a->AddData(handle, c->type[i], c->data[i], c->size[i], "input");
  }
  r.complete = a->Complete(handle);
  for (int i = 0; i < 4; ++i) r.out[i] = read_output(handle, a->size[i], a->get[i], 1);
  a->Destroy(&handle);
  return r;
}

/* NVRTC, to make the inputs. */
typedef int (*nvrtc_create)(void**, const char*, const char*, int, const char* const*,
                            const char* const*);
static char* nvrtc_output(void* nvrtc, const char* source, int num_options, const char** options,
                          int ltoir, size_t* size) {
  nvrtc_create create;
  int (*compile)(void*, int, const char* const*);
  size_fn get_size;
  get_fn get;
  int (*destroy)(void**);
  *(void**)&create = must_sym(nvrtc, "nvrtcCreateProgram");
  *(void**)&compile = must_sym(nvrtc, "nvrtcCompileProgram");
  *(void**)&get_size = must_sym(nvrtc, ltoir ? "nvrtcGetLTOIRSize" : "nvrtcGetPTXSize");
  *(void**)&get = must_sym(nvrtc, ltoir ? "nvrtcGetLTOIR" : "nvrtcGetPTX");
  *(void**)&destroy = must_sym(nvrtc, "nvrtcDestroyProgram");
  void* prog = NULL;
  if (create(&prog, source, "input.cu", 0, NULL, NULL) != 0 ||
      compile(prog, num_options, options) != 0 || get_size(prog, size) != 0) {
    fprintf(stderr, "cannot make a link input\n");
    exit(2);
  }
  char* out = malloc(*size + 1);
  get(prog, out);
  destroy(&prog);
  if (!ltoir) *size = strlen(out);
  return out;
}

static int run_nvjitlink(const char* real_path, const char* dropin_path, const char* nvrtc_path,
                         const char* workdir) {
  jitlink_api real = load_jitlink(real_path);
  jitlink_api dropin = load_jitlink(dropin_path);
  void* nvrtc = open_library(nvrtc_path);
  const char* kernel =
      "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] = 2.0f * p[threadIdx.x]; }\n";
  const char* uses_external =
      "extern __device__ float helper(float);\n"
      "extern \"C\" __global__ void u(float* p) { p[0] = helper(p[0]); }\n";
  const char* ptx_options[] = {"-arch=compute_90"};
  const char* lto_options[] = {"-arch=sm_90", "-dlto", "-rdc=true"};
  const char* rdc_options[] = {"-arch=compute_90", "-rdc=true"};
  size_t ptx_size = 0, lto_size = 0, ext_size = 0;
  char* ptx = nvrtc_output(nvrtc, kernel, 1, ptx_options, 0, &ptx_size);
  char* lto = nvrtc_output(nvrtc, kernel, 3, lto_options, 1, &lto_size);
  char* ext = nvrtc_output(nvrtc, uses_external, 2, rdc_options, 0, &ext_size);
  char ptx_file[4200];
  snprintf(ptx_file, sizeof ptx_file, "%s/input.ptx", workdir);
  FILE* f = fopen(ptx_file, "w");
  fwrite(ptx, 1, ptx_size, f);
  fclose(f);

  link_case cases[] = {
      {"PTX to cubin", 1, {"-arch=sm_90"}, 1, {2}, {ptx}, {ptx_size}, {NULL}},
      {"PTX to cubin, verbose", 2, {"-arch=sm_90", "-verbose"}, 1, {2}, {ptx}, {ptx_size}, {NULL}},
      {"LTO-IR to cubin", 2, {"-arch=sm_90", "-lto"}, 1, {3}, {lto}, {lto_size}, {NULL}},
      {"LTO-IR to PTX", 3, {"-arch=sm_90", "-lto", "-ptx"}, 1, {3}, {lto}, {lto_size}, {NULL}},
      {"a PTX file", 1, {"-arch=sm_90"}, 1, {2}, {NULL}, {0}, {ptx_file}},
      {"two inputs, one unresolved symbol (fails)",
       1,
       {"-arch=sm_90"},
       2,
       {2, 2},
       {ptx, ext},
       {ptx_size, ext_size},
       {NULL, NULL}},
      {"no arch (create fails)", 1, {"-verbose"}, 1, {2}, {ptx}, {ptx_size}, {NULL}},
  };
  const int n = (int)(sizeof cases / sizeof cases[0]);
  int cacheable = 0;
  for (int i = 0; i < n; ++i) {
    run_result want = run_link(&real, &cases[i]);
    run_result first = run_link(&dropin, &cases[i]);
    run_result second = run_link(&dropin, &cases[i]);
    const int timed = strstr(cases[i].label, "verbose") != NULL;
    check(same_run(&want, &first, timed), "first link equals nvJitLink's", cases[i].label);
    check(same_run(&want, &second, timed), "second link equals nvJitLink's", cases[i].label);
    if (want.create == 0 && want.complete == 0) ++cacheable;
    free_run(&want);
    free_run(&first);
    free_run(&second);
  }
  /* -Xptxas=-optf=FILE, a relative path: ptxas reads FILE, which the key does not cover, so the
   * drop-in bypasses; a link after each edit of FILE is nvJitLink's (issue 39). Neither a miss
   * nor a hit: not counted as cacheable. */
  if (chdir(workdir) == 0) {
    const char* contents[] = {"--maxrregcount=32\n", "--maxrregcount=64\n", "--no-such-option\n"};
    const char* labels[] = {"ptxas options file: --maxrregcount=32",
                            "ptxas options file: --maxrregcount=64",
                            "ptxas options file: an unknown option (fails)"};
    link_case c = {
        "-Xptxas=-optf=FILE", 2,     {"-arch=sm_90", "-Xptxas=-optf=ptxas.opts"}, 1, {2}, {ptx},
        {ptx_size},           {NULL}};
    for (int i = 0; i < 3; ++i) {
      FILE* o = fopen("ptxas.opts", "w");
      fputs(contents[i], o);
      fclose(o);
      run_result want = run_link(&real, &c);
      run_result got = run_link(&dropin, &c);
      check(same_run(&want, &got, 0), "a link after editing the file equals nvJitLink's",
            labels[i]);
      /* nvJitLink compiles PTX as it is added: the unknown option fails AddData. */
      check((want.add[0] == 0) == (i < 2), "nvJitLink read the file", labels[i]);
      free_run(&want);
      free_run(&got);
    }
  } else {
    check(0, "chdir to the work directory", workdir);
  }
  printf("cacheable cases: %d\n", cacheable);
  free(ptx);
  free(lto);
  free(ext);
  return 0;
}

/* --- libNVVM -----------------------------------------------------------------------------------
 */

typedef struct {
  int (*Create)(void**);
  int (*Destroy)(void**);
  int (*Add)(void*, const char*, size_t, const char*);
  int (*LazyAdd)(void*, const char*, size_t, const char*);
  int (*Compile)(void*, int, const char**);
  size_fn size[2];
  get_fn get[2];
} nvvm_api;

static nvvm_api load_nvvm(const char* path) {
  void* lib = open_library(path);
  nvvm_api a;
  *(void**)&a.Create = must_sym(lib, "nvvmCreateProgram");
  *(void**)&a.Destroy = must_sym(lib, "nvvmDestroyProgram");
  *(void**)&a.Add = must_sym(lib, "nvvmAddModuleToProgram");
  *(void**)&a.LazyAdd = must_sym(lib, "nvvmLazyAddModuleToProgram");
  *(void**)&a.Compile = must_sym(lib, "nvvmCompileProgram");
  *(void**)&a.size[0] = must_sym(lib, "nvvmGetCompiledResultSize");
  *(void**)&a.get[0] = must_sym(lib, "nvvmGetCompiledResult");
  *(void**)&a.size[1] = must_sym(lib, "nvvmGetProgramLogSize");
  *(void**)&a.get[1] = must_sym(lib, "nvvmGetProgramLog");
  return a;
}

typedef struct {
  const char* label;
  int num_options;
  const char* options[4];
  int num_modules;
  const char* modules[3];
  int lazy[3];
} nvvm_case;

static run_result run_nvvm_case(const nvvm_api* a, const nvvm_case* c) {
  run_result r;
  memset(&r, 0, sizeof r);
  void* prog = NULL;
  r.create = a->Create(&prog);
  if (r.create != 0) return r;
  for (int i = 0; i < c->num_modules; ++i) {
    r.add[i] =
        (c->lazy[i] ? a->LazyAdd : a->Add)(prog, c->modules[i], strlen(c->modules[i]), "module");
  }
  r.complete = a->Compile(prog, c->num_options, (const char**)c->options);
  for (int i = 0; i < 2; ++i) r.out[i] = read_output(prog, a->size[i], a->get[i], 0);
  a->Destroy(&prog);
  return r;
}

static char* read_text(const char* dir, const char* name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = calloc((size_t)size + 1, 1);
  if (fread(text, 1, (size_t)size, f) != (size_t)size) exit(2);
  fclose(f);
  return text;
}

static int run_nvvm(const char* real_path, const char* dropin_path, const char* data_dir) {
  nvvm_api real = load_nvvm(real_path);
  nvvm_api dropin = load_nvvm(dropin_path);
  char* scale = read_text(data_dir, "scale.ll");
  char* uses = read_text(data_dir, "uses_helper.ll");
  char* helper = read_text(data_dir, "helper_module.ll");
  nvvm_case cases[] = {
      {"one module", 1, {"-arch=compute_90"}, 1, {scale}, {0}},
      {"one module, -opt=0", 2, {"-arch=compute_90", "-opt=0"}, 1, {scale}, {0}},
      {"two modules", 1, {"-arch=compute_90"}, 2, {uses, helper}, {0, 0}},
      {"a lazy module", 1, {"-arch=compute_90"}, 2, {uses, helper}, {0, 1}},
      {"LTO-IR out", 2, {"-arch=compute_90", "-gen-lto"}, 1, {scale}, {0}},
      {"unresolved helper (fails)", 1, {"-arch=compute_90"}, 1, {uses}, {0}},
      {"invalid IR (fails)", 1, {"-arch=compute_90"}, 1, {"this is not IR"}, {0}},
  };
  const int n = (int)(sizeof cases / sizeof cases[0]);
  int cacheable = 0;
  for (int i = 0; i < n; ++i) {
    run_result want = run_nvvm_case(&real, &cases[i]);
    run_result first = run_nvvm_case(&dropin, &cases[i]);
    run_result second = run_nvvm_case(&dropin, &cases[i]);
    check(same_run(&want, &first, 0), "first compile equals libNVVM's", cases[i].label);
    check(same_run(&want, &second, 0), "second compile equals libNVVM's", cases[i].label);
    if (want.create == 0 && want.complete == 0) ++cacheable;
    free_run(&want);
    free_run(&first);
    free_run(&second);
  }
  printf("cacheable cases: %d\n", cacheable);
  free(scale);
  free(uses);
  free(helper);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 6 && strcmp(argv[1], "nvjitlink") == 0) {
    run_nvjitlink(argv[2], argv[3], argv[4], argv[5]);
  } else if (argc >= 5 && strcmp(argv[1], "nvvm") == 0) {
    run_nvvm(argv[2], argv[3], argv[4]);
  } else {
    fprintf(stderr,
            "usage: %s nvjitlink REAL DROPIN REAL_NVRTC WORKDIR | nvvm REAL DROPIN DATA_DIR\n",
            argv[0]);
    return 2;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
