/* What a program finds when it probes a CUDA library by name, as cuda-bindings and C loaders do:
 * dlopen(SONAME, RTLD_NOW | RTLD_LOCAL), then dlsym and dlvsym (version node VERSION, "-" for none)
 * for each name on stdin, one line each: "NAME dlsym found|absent dlvsym found|absent". Run
 * plainly and under `cucore run`, the two outputs must be equal line by line
 * (tests/dropin/run_dlsym_probe.sh). Usage: dlsym_probe SONAME VERSION < NAMES */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: dlsym_probe SONAME VERSION < NAMES\n");
    return 2;
  }
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    printf("%s: not loaded\n", argv[1]);
    return 0;
  }
  printf("%s: loaded\n", argv[1]);
  struct link_map* map = NULL;
  if (dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map != NULL) {
    fprintf(stderr, "file %s\n", map->l_name); /* which file: the test checks, not compares */
  }
  char name[512];
  while (fgets(name, sizeof name, stdin) != NULL) {
    name[strcspn(name, "\r\n")] = '\0';
    if (name[0] == '\0') continue;
    const int plain = dlsym(library, name) != NULL;
    const int versioned = strcmp(argv[2], "-") != 0 && dlvsym(library, name, argv[2]) != NULL;
    printf("%s dlsym %s dlvsym %s\n", name, plain ? "found" : "absent",
           versioned ? "found" : "absent");
  }
  dlclose(library);
  return 0;
}
