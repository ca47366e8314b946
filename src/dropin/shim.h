/* The thin front of a drop-in library (docs/transparent-cache.md, "The drop-in files"): the file
 * named and versioned as the real library, exporting its API, with no dependency but the C library.
 * Each function loads the drop-in's engine (the forwarding and caching code, with cucore and its
 * dependencies) from the same directory on its first call, and calls the engine's function of the
 * same name. So a preloaded drop-in costs a process that never calls it almost nothing.
 *
 * A shim file defines CUCORE_ENGINE_FILE ("libcucore_dropin_nvrtc.so") and CUCORE_SHIM_LIBRARY
 * ("NVRTC"), includes this header first (it defines _GNU_SOURCE for dladdr), and writes one
 * CUCORE_SHIM(...) per exported function (generated: src/dropin/generated/NAME.inc). */
#ifndef CUCORE_DROPIN_SHIM_H
#define CUCORE_DROPIN_SHIM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static void* cucore_engine;
static const char cucore_anchor = 0; /* an address inside this file, for dladdr */
static pthread_once_t cucore_engine_once = PTHREAD_ONCE_INIT;

static void cucore_load_engine(void) {
  Dl_info info;
  char path[4096];
  path[0] = '\0';
  if (dladdr(&cucore_anchor, &info) != 0 && info.dli_fname != NULL) {
    const char* slash = strrchr(info.dli_fname, '/');
    const size_t dir = slash != NULL ? (size_t)(slash - info.dli_fname) + 1 : 0;
    if (dir + sizeof(CUCORE_ENGINE_FILE) < sizeof path) {
      memcpy(path, info.dli_fname, dir);
      memcpy(path + dir, CUCORE_ENGINE_FILE, sizeof(CUCORE_ENGINE_FILE));
    }
  }
  if (path[0] == '\0') return;
  cucore_engine = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (cucore_engine == NULL) {
    /* Every call then fails as without a real library: say why once. */
    const char* why = dlerror();
    fprintf(stderr, "cucore run: cannot load the %s drop-in's engine %s: %s\n", CUCORE_SHIM_LIBRARY,
            path, why ? why : "dlopen failed");
  }
}

/* The engine's function `name`, or NULL when the engine cannot be loaded. */
static void* cucore_engine_function(const char* name) {
  pthread_once(&cucore_engine_once, cucore_load_engine);
  return cucore_engine != NULL ? dlsym(cucore_engine, name) : NULL;
}

/* The real library's `name` (the engine finds the library the program would have loaded), or NULL
 * when it lacks it or there is none. */
static void* cucore_real_function(const char* name) {
  void* (*real_symbol)(const char*);
  *(void**)&real_symbol = cucore_engine_function("cucore_dropin_real_symbol");
  return real_symbol != NULL ? real_symbol(name) : NULL;
}

/* One exported function: RET NAME PARAMS calling the engine's ENGINE (the forwarding and caching
 * code) with ARGS, or the real library's NAME where the engine has no ENGINE. A function the real
 * library lacks returns FAIL and does nothing else: as near its absence as an export allows. The
 * pointer is looked up once (an atomic, so threads may race to store the same). */
#define CUCORE_SHIM(ret, fail, name, engine, params, args)                \
  __attribute__((visibility("default"))) ret name params {                \
    static void* cucore_function;                                         \
    void* cucore_f = __atomic_load_n(&cucore_function, __ATOMIC_ACQUIRE); \
    if (cucore_f == NULL) {                                               \
      void* cucore_real = cucore_real_function(#name);                    \
      if (cucore_real == NULL) return fail;                               \
      cucore_f = cucore_engine_function(#engine);                         \
      if (cucore_f == NULL) cucore_f = cucore_real;                       \
      __atomic_store_n(&cucore_function, cucore_f, __ATOMIC_RELEASE);     \
    }                                                                     \
    ret(*cucore_typed) params;                                            \
    *(void**)&cucore_typed = cucore_f;                                    \
    return cucore_typed args;                                             \
  }

#endif
