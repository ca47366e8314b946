/* A stand-in for a release newer than the drop-ins (tests/dropin/run_versions.sh): a
 * libnvrtc.so.13 exporting a name no known NVRTC has, which the program calls directly. */
__attribute__((visibility("default"))) int nvrtcVersion(int* major, int* minor) {
  *major = 13;
  *minor = 99;
  return 0;
}
__attribute__((visibility("default"))) int nvrtcFutureFunction(void) {
  return 42;
}
