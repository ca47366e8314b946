/* What the drop-in tests' C programs share: a library opened by path and its symbols (a failure
 * is fatal: exit 2), and NVRTC's builtins library opened beside a libnvrtc. */
#ifndef CUCORE_TESTS_DROPIN_DL_SUPPORT_H
#define CUCORE_TESTS_DROPIN_DL_SUPPORT_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline void* open_library(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "cannot open %s: %s\n", path, dlerror());
    exit(2);
  }
  return lib;
}

static inline void* must_sym(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == NULL) {
    fprintf(stderr, "no symbol %s: %s\n", name, dlerror());
    exit(2);
  }
  return p;
}

/* NVRTC opens libnvrtc-builtins.so.MAJOR.MINOR through its $ORIGIN run path, which a sanitizer's
   dlopen interceptor hides: with a wheel's NVRTC (no builtins on the loader's path) the reference
   compile failed under TSan. Opened here by path first, as cucore's loader does. `version`: the
   nvrtcVersion of the library at `nvrtc_path`. */
static inline void open_nvrtc_builtins(const char* nvrtc_path, int (*version)(int*, int*)) {
  int major = 0, minor = 0;
  const char* slash = strrchr(nvrtc_path, '/');
  if (slash != NULL && version(&major, &minor) == 0) {
    char builtins[4096];
    snprintf(builtins, sizeof builtins, "%.*slibnvrtc-builtins.so.%d.%d",
             (int)(slash - nvrtc_path + 1), nvrtc_path, major, minor);
    if (access(builtins, R_OK) == 0) (void)dlopen(builtins, RTLD_NOW | RTLD_LOCAL);
  }
}

#endif
