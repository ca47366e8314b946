/* The context oracle's getenv interposer (LD_PRELOAD): appends "LIBRARY NAME\n" to the file
 * $CUCORE_GETENV_SPY_LOG for every getenv / secure_getenv call made from a CUDA compiler library
 * (libnvrtc*, libnvvm*, libnvJitLink*: the caller's return address, through dladdr), so the test
 * can list the variables THIS compiler reads. Calls from anything else are not recorded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

typedef char* (*getenv_fn)(const char*);

static getenv_fn real_of(const char* symbol) {
  return (getenv_fn)dlsym(RTLD_NEXT, symbol);
}

static void record(const void* caller, const char* name) {
  Dl_info info;
  if (name == NULL || dladdr(caller, &info) == 0 || info.dli_fname == NULL) return;
  const char* base = strrchr(info.dli_fname, '/');
  base = base ? base + 1 : info.dli_fname;
  if (strncmp(base, "libnvrtc", 8) != 0 && strncmp(base, "libnvvm", 7) != 0 &&
      strncmp(base, "libnvJitLink", 12) != 0) {
    return;
  }
  static getenv_fn real_getenv;
  if (real_getenv == NULL) real_getenv = real_of("getenv");
  const char* log = real_getenv ? real_getenv("CUCORE_GETENV_SPY_LOG") : NULL;
  if (log == NULL) return;
  const int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  /* One write per line: O_APPEND keeps lines of concurrent threads whole. */
  char line[512];
  size_t n = 0;
  for (const char* p = base; *p && *p != '.' && n < 200; ++p) line[n++] = *p;
  line[n++] = ' ';
  for (const char* p = name; *p && n < sizeof line - 1; ++p) line[n++] = *p;
  line[n++] = '\n';
  if (write(fd, line, n) < 0) { /* best effort */
  }
  close(fd);
}

char* getenv(const char* name) {
  static getenv_fn real;
  if (real == NULL) real = real_of("getenv");
  record(__builtin_return_address(0), name);
  return real ? real(name) : NULL;
}

char* secure_getenv(const char* name) {
  static getenv_fn real;
  if (real == NULL) real = real_of("secure_getenv");
  record(__builtin_return_address(0), name);
  return real ? real(name) : NULL;
}
