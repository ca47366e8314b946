/* An unmodified NVRTC program for compile_server_bench: T threads compile K distinct CUB kernels
 * (one program name, one #include prefix) with the NVRTC the loader finds by name, as cuDF or a
 * cuda.core program with a thread pool does. Run plain (NVRTC serializes its threads) or under
 * `cucore run` (the drop-in sends misses to the compile server).
 * Usage: nvrtc_threads KERNELS THREADS FIRST ARCH INCLUDE_DIR [INCLUDE_DIR...]
 * Kernels FIRST .. FIRST+KERNELS-1; prints nothing; exit 1 on any failure. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*create_fn)(void**, const char*, const char*, int, const char* const*,
                         const char* const*);
typedef int (*compile_fn)(void*, int, const char* const*);
typedef int (*size_fn)(void*, size_t*);
typedef int (*destroy_fn)(void**);

static create_fn create;
static compile_fn compile;
static size_fn cubin_size;
static destroy_fn destroy;
static int kernels, threads, first;
static const char* options[16];
static int option_count;
static int next_kernel;
static int failures;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;

static void kernel_source(int i, char* out, size_t size) {
  const int items = 1 + i % 8;
  snprintf(out, size,
           "#include <cub/block/block_radix_sort.cuh>\n#include <cub/block/block_scan.cuh>\n"
           "__global__ void sort%d(unsigned* d) {\n"
           "  using S = cub::BlockRadixSort<unsigned, 128, %d>;\n"
           "  __shared__ typename S::TempStorage t;\n"
           "  unsigned k[%d];\n"
           "  for (int j = 0; j < %d; ++j) k[j] = d[threadIdx.x * 8 + j] + %d;\n"
           "  S(t).Sort(k);\n"
           "  d[threadIdx.x] = k[0];\n"
           "}\n",
           i, items, items, items, i);
}

static void* work(void* unused) {
  (void)unused;
  char source[2048];
  for (;;) {
    pthread_mutex_lock(&mutex);
    const int i = next_kernel < kernels ? first + next_kernel++ : -1;
    pthread_mutex_unlock(&mutex);
    if (i < 0) return NULL;
    kernel_source(i, source, sizeof source);
    void* prog = NULL;
    size_t size = 0;
    int ok = create(&prog, source, "kernel.cu", 0, NULL, NULL) == 0 &&
             compile(prog, option_count, options) == 0 && cubin_size(prog, &size) == 0 && size > 0;
    if (prog != NULL) destroy(&prog);
    if (!ok) {
      pthread_mutex_lock(&mutex);
      ++failures;
      pthread_mutex_unlock(&mutex);
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s KERNELS THREADS FIRST ARCH INCLUDE_DIR...\n", argv[0]);
    return 2;
  }
  kernels = atoi(argv[1]);
  threads = atoi(argv[2]);
  first = atoi(argv[3]);
  static char arch[64], includes[8][1024];
  snprintf(arch, sizeof arch, "--gpu-architecture=%s", argv[4]);
  options[option_count++] = arch;
  for (int a = 5; a < argc && a < 13; ++a) {
    snprintf(includes[a - 5], sizeof includes[a - 5], "--include-path=%s", argv[a]);
    options[option_count++] = includes[a - 5];
  }
  void* lib = dlopen("libnvrtc.so.13", RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  /* POSIX's dlsym returns functions as void*: copied, as ISO C has no cast between them. */
  void* symbol = dlsym(lib, "nvrtcCreateProgram");
  memcpy(&create, &symbol, sizeof create);
  symbol = dlsym(lib, "nvrtcCompileProgram");
  memcpy(&compile, &symbol, sizeof compile);
  symbol = dlsym(lib, "nvrtcGetCUBINSize");
  memcpy(&cubin_size, &symbol, sizeof cubin_size);
  symbol = dlsym(lib, "nvrtcDestroyProgram");
  memcpy(&destroy, &symbol, sizeof destroy);
  if (!create || !compile || !cubin_size || !destroy) return 1;
  pthread_t pool[256];
  if (threads < 1 || threads > 256) return 2;
  for (int t = 0; t < threads; ++t) pthread_create(&pool[t], NULL, work, NULL);
  for (int t = 0; t < threads; ++t) pthread_join(pool[t], NULL);
  return failures == 0 ? 0 : 1;
}
