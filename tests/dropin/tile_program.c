/* NVRTC 13.3+ compiles under `cucore run` (tests/dropin/run_tile_bundled.sh), built against CUDA
 * 13.5's headers: a program with a Tile and a SIMT kernel under each Tile option (its Tile IR, PTX,
 * cubin and LTO-IR getters, and a lowered name), the Tile IR asked of a compile that enables no
 * Tile code, a compile with --use-bundled-headers=DIR, and an nvJitLink -lto link's linked LTO-IR.
 * Prints each return code, size and a checksum of the bytes.
 * Usage: tile_program INCLUDE_DIR BUNDLED_DIR [tile|bundled|link]... (none: all) */
#include <nvJitLink.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long checksum(const char* data, size_t size) {
  unsigned long h = 5381;
  for (size_t i = 0; i < size; ++i) h = h * 33 + (unsigned char)data[i];
  return h;
}

typedef nvrtcResult (*size_fn)(nvrtcProgram, size_t*);
typedef nvrtcResult (*get_fn)(nvrtcProgram, char*);

static void print_output(const char* what, nvrtcProgram prog, size_fn size_of, get_fn get) {
  size_t size = 0;
  nvrtcResult rs = size_of(prog, &size);
  char* bytes = calloc(size + 1, 1);
  nvrtcResult rg = rs == NVRTC_SUCCESS ? get(prog, bytes) : rs;
  printf("  %s %d %zu %d %lx\n", what, (int)rs, size, (int)rg,
         rg == NVRTC_SUCCESS ? checksum(bytes, size) : 0ul);
  free(bytes);
}

static char* compile(const char* label, const char* src, int n, const char** options,
                     size_t* ptx_size) {
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src, "tile.cu", 0, NULL, NULL) != NVRTC_SUCCESS) exit(2);
  nvrtcAddNameExpression(prog, "simt_scale");
  nvrtcResult r = nvrtcCompileProgram(prog, n, options);
  printf("%s: compile %d\n", label, (int)r);
  print_output("tile-ir", prog, nvrtcGetTileIRSize, nvrtcGetTileIR);
  print_output("ptx", prog, nvrtcGetPTXSize, nvrtcGetPTX);
  print_output("cubin", prog, nvrtcGetCUBINSize, nvrtcGetCUBIN);
  print_output("ltoir", prog, nvrtcGetLTOIRSize, nvrtcGetLTOIR);
  /* The Tile IR again, after the other getters. */
  print_output("tile-ir", prog, nvrtcGetTileIRSize, nvrtcGetTileIR);
  const char* lowered = NULL;
  nvrtcResult rl = nvrtcGetLoweredName(prog, "simt_scale", &lowered);
  printf("  lowered %d %s\n", (int)rl, rl == NVRTC_SUCCESS && lowered ? lowered : "-");
  char* out = NULL;
  if (ptx_size != NULL) {
    nvrtcGetLTOIRSize(prog, ptx_size);
    out = malloc(*ptx_size);
    nvrtcGetLTOIR(prog, out);
  }
  nvrtcDestroyProgram(&prog);
  return out;
}

static const char* kMixed =
    "#include <cuda_tile.h>\n"
    "namespace ct = ::cuda::tiles;\n"
    "__tile_global__ void tile_copy(float* out, const float* in, long n) {\n"
    "  auto bx = ct::bid().x;\n"
    "  auto src = ct::partition_view{ct::tensor_span{in, ct::extents<long, "
    "ct::dynamic_extent>{n}}, ct::shape<128>{}};\n"
    "  auto dst = ct::partition_view{ct::tensor_span{out, ct::extents<long, "
    "ct::dynamic_extent>{n}}, ct::shape<128>{}};\n"
    "  dst.store_masked(src.load_masked(bx), bx);\n"
    "}\n"
    "__global__ void simt_scale(float* out, const float* in) { out[threadIdx.x] = 2.0f * "
    "in[threadIdx.x]; }\n";

static const char* kSimt =
    "__global__ void simt_scale(float* out, const float* in) { out[threadIdx.x] = in[0]; }\n";

static const char* kComplex =
    "#include <cuda/std/complex>\n"
    "__global__ void simt_scale(float* out, const float* in) {\n"
    "  cuda::std::complex<float> c(in[0], 2.0f);\n"
    "  out[threadIdx.x] = (c * c).imag();\n"
    "}\n";

static int wants(int argc, char** argv, const char* what) {
  if (argc <= 3) return 1;
  for (int i = 3; i < argc; ++i) {
    if (strcmp(argv[i], what) == 0) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  char include[4096], bundled[4096];
  snprintf(include, sizeof include, "-I%s", argv[1]);
  snprintf(bundled, sizeof bundled, "--use-bundled-headers=%s", argv[2]);
  if (wants(argc, argv, "tile")) {
    const char* enable[] = {"-arch=sm_100", "-std=c++20", include, "-enable-tile"};
    compile("-enable-tile", kMixed, 4, enable, NULL);
    const char* enable_long[] = {"-arch=sm_100", "-std=c++20", include, "--enable-tile"};
    compile("--enable-tile", kMixed, 4, enable_long, NULL);
    const char* tile_only[] = {"-arch=sm_100", "-std=c++20", include, "-tile-only"};
    compile("-tile-only", kMixed, 4, tile_only, NULL);
    const char* simt_only[] = {"-arch=sm_100", "-std=c++20", include, "-simt-only"};
    compile("-simt-only", kMixed, 4, simt_only, NULL);
    const char* lto[] = {"-arch=sm_100", "-std=c++20", include, "-enable-tile", "-dlto"};
    compile("-enable-tile -dlto", kMixed, 5, lto, NULL);
    const char* plain[] = {"-arch=sm_100"};
    compile("no Tile option", kSimt, 1, plain, NULL);
  }
  if (wants(argc, argv, "bundled")) {
    const char* b[] = {"-arch=sm_90", bundled};
    compile("--use-bundled-headers", kComplex, 2, b, NULL);
  }
  if (wants(argc, argv, "link")) {
    const char* dlto[] = {"-arch=sm_90", "-dlto", "-rdc=true"};
    size_t size = 0;
    char* ltoir = compile("-dlto for a link", kSimt, 3, dlto, &size);
    const char* sets[2][3] = {{"-arch=sm_90", "-lto", "-r"}, {"-arch=sm_90", "-lto", NULL}};
    for (int k = 0; k < 2; ++k) {
      nvJitLinkHandle link;
      if (nvJitLinkCreate(&link, k == 0 ? 3 : 2, sets[k]) != NVJITLINK_SUCCESS) return 3;
      nvJitLinkAddData(link, NVJITLINK_INPUT_LTOIR, ltoir, size, "simt.ltoir");
      nvJitLinkResult lr = nvJitLinkComplete(link);
      size_t lsize = 0;
      nvJitLinkResult rs = nvJitLinkGetLinkedLTOIRSize(link, &lsize);
      char* linked = calloc(lsize + 1, 1);
      nvJitLinkResult rg = rs == NVJITLINK_SUCCESS ? nvJitLinkGetLinkedLTOIR(link, linked) : rs;
      size_t csize = 0;
      nvJitLinkResult rc = nvJitLinkGetLinkedCubinSize(link, &csize);
      printf("link %s: complete %d linked-ltoir %d %zu %d %lx cubin %d %zu\n",
             k == 0 ? "-lto -r" : "-lto", (int)lr, (int)rs, lsize, (int)rg,
             rg == NVJITLINK_SUCCESS ? checksum(linked, lsize) : 0ul, (int)rc, csize);
      free(linked);
      nvJitLinkDestroy(&link);
    }
    free(ltoir);
  }
  return 0;
}
