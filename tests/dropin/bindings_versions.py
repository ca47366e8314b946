"""cuda-bindings through NVIDIA's wheels of one release (tests/dropin/run_python_versions.sh):
compiles with NVRTC and, with --new (13.5), calls what 13.1+/13.3+ added (libNVVM's
nvvmLLVMVersion, NVRTC's nvrtcGetTileIRSize). Prints what each returned, and which NVRTC major."""
import hashlib
import sys

from cuda.bindings import nvrtc

err, major, minor = nvrtc.nvrtcVersion()
print("nvrtc", major)
err, prog = nvrtc.nvrtcCreateProgram(b'extern "C" __global__ void k(float* x) { x[0] = 1; }',
                                     b"k.cu", 0, [], [])
print("compile", nvrtc.nvrtcCompileProgram(prog, 1, [b"-arch=compute_90"]))
err, size = nvrtc.nvrtcGetPTXSize(prog)
ptx = b" " * size
print("ptx", nvrtc.nvrtcGetPTX(prog, ptx), size, hashlib.sha256(ptx).hexdigest()[:16])
if "--new" in sys.argv:
    from cuda.bindings import nvvm

    print("llvm", nvvm.llvm_version("compute_90"))
    print("tile", nvrtc.nvrtcGetTileIRSize(prog))
