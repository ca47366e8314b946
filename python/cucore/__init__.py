"""cucore: run-time CUDA compilation (NVRTC, nvJitLink, libNVVM) with a program cache.

The caches are mappings from keys (bytes or str) to :class:`ObjectCode`; ``cucore.cuda_core``
wraps them as ``cuda.core.utils.ProgramCacheResource`` for ``cuda.core``'s
``Program.compile(..., cache=...)``. See docs/python.md.
"""

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
    SQLiteProgramCache,
    default_cache_dir,
    explain_program_cache_key,
    make_program_cache_key,
    open_program_cache,
)
from cucore._options import ProgramOptions

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
    "SQLiteProgramCache",
    "default_cache_dir",
    "explain_program_cache_key",
    "make_program_cache_key",
    "open_program_cache",
]
