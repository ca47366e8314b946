/* A C program built against one CUDA release's headers and linked with -z now (tests/dropin/
 * run_versions.sh): its calls bind to that release's names (nvJitLink's __nvJitLinkCreate_13_5,
 * NVRTC 13.3+'s nvrtcGetTileIRSize, libNVVM 13.1+'s nvvmLLVMVersion) before main. It compiles a
 * kernel with NVRTC, links the PTX with nvJitLink, and prints what each returned. */
#include <nvJitLink.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#if CUCORE_TEST_NVVM
#include <nvvm.h>
#endif

static unsigned long checksum(const char* data, size_t size) {
  unsigned long h = 5381;
  for (size_t i = 0; i < size; ++i) h = h * 33 + (unsigned char)data[i];
  return h;
}

int main(void) {
  const char* src =
      "extern \"C\" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }\n";
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  printf("nvrtc %d\n", major); /* the minor differs between the real library and none */
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src, "scale.cu", 0, NULL, NULL) != NVRTC_SUCCESS) return 2;
  const char* opts[] = {"-arch=compute_90"};
  nvrtcResult r = nvrtcCompileProgram(prog, 1, opts);
  size_t ptx_size = 0;
  nvrtcGetPTXSize(prog, &ptx_size);
  char* ptx = malloc(ptx_size);
  nvrtcGetPTX(prog, ptx);
  printf("compile %d ptx %zu %lx\n", (int)r, ptx_size, checksum(ptx, ptx_size));
#if CUCORE_TEST_TILE
  size_t tile = 0;
  printf("tile-ir size code %d\n", (int)nvrtcGetTileIRSize(prog, &tile));
#endif
  nvrtcDestroyProgram(&prog);

  nvJitLinkHandle link;
  const char* link_opts[] = {"-arch=sm_90"};
  if (nvJitLinkCreate(&link, 1, link_opts) != NVJITLINK_SUCCESS) return 3;
  nvJitLinkAddData(link, NVJITLINK_INPUT_PTX, ptx, ptx_size, "scale.ptx");
  nvJitLinkResult lr = nvJitLinkComplete(link);
  size_t cubin_size = 0;
  nvJitLinkGetLinkedCubinSize(link, &cubin_size);
  char* cubin = malloc(cubin_size);
  nvJitLinkGetLinkedCubin(link, cubin);
  printf("link %d cubin %zu %lx\n", (int)lr, cubin_size, checksum(cubin, cubin_size));
  nvJitLinkDestroy(&link);
#if CUCORE_TEST_NVVM
  int llvm = 0;
  printf("nvvmLLVMVersion %d llvm %d\n", (int)nvvmLLVMVersion("compute_90", &llvm), llvm);
#endif
  free(ptx);
  free(cubin);
  return 0;
}
