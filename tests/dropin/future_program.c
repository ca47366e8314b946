/* Calls the future NVRTC's new function directly (linked with -z now: without it the program
 * cannot even start), tests/dropin/run_versions.sh. */
#include <stdio.h>
int nvrtcVersion(int* major, int* minor);
int nvrtcFutureFunction(void);
int main(void) {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  printf("nvrtc %d.%d future %d\n", major, minor, nvrtcFutureFunction());
  return 0;
}
