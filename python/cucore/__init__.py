"""cucore: run-time CUDA compilation (NVRTC, nvJitLink, libNVVM) with a program cache.

The caches are mappings from keys (bytes or str) to :class:`ObjectCode`; ``cucore.cuda_core``
wraps them as ``cuda.core.utils.ProgramCacheResource`` for ``cuda.core``'s
``Program.compile(..., cache=...)``. See docs/python.md.
"""

from cucore import _cucore
from cucore._cucore import (
    CompileError,
    CudaError,
    Error,
    ExtraDigestRequired,
    FileStreamProgramCache,
    InMemoryProgramCache,
    InvalidArgument,
    LibraryError,
    LibraryNotFound,
    ObjectCode,
    Program,
    ProgramCache,
    RedisProgramCache,
    SQLiteProgramCache,
    TieredProgramCache,
    default_cache_dir,
    explain_program_cache_key,
    export_pack,
    import_pack,
    make_program_cache_key,
    open_program_cache,
    verify_pack,
    wait_for_verification,
)
from cucore._options import ProgramOptions
from cucore._wheels import cuda_wheel_site_packages as _cuda_wheel_site_packages

# NVIDIA's CUDA 13 wheels (pip install "cucore[cu13]") in this interpreter's sys.path: the library
# search takes NVRTC, nvJitLink, libNVVM and the toolkit headers from them when no toolkit is
# installed (docs/library-discovery.md). Before any compile, so before the first library probe.
for _site in _cuda_wheel_site_packages():
    _cucore._add_wheel_directory(_site)

__version__ = "0.1.0"

__all__ = [
    "CompileError",
    "CudaError",
    "Error",
    "ExtraDigestRequired",
    "FileStreamProgramCache",
    "InMemoryProgramCache",
    "InvalidArgument",
    "LibraryError",
    "LibraryNotFound",
    "ObjectCode",
    "Program",
    "ProgramCache",
    "ProgramOptions",
    "RedisProgramCache",
    "SQLiteProgramCache",
    "TieredProgramCache",
    "default_cache_dir",
    "explain_program_cache_key",
    "export_pack",
    "import_pack",
    "make_program_cache_key",
    "open_program_cache",
    "verify_pack",
    "wait_for_verification",
]
