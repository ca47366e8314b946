"""
cucore's native module: run-time CUDA compilation with a program cache.
"""

from collections.abc import Iterable, Mapping
import datetime
import os
from typing import Any

from cucore import (
    CompileError as CompileError,
    CudaError as CudaError,
    Error as Error,
    ExtraDigestRequired as ExtraDigestRequired,
    InvalidArgument as InvalidArgument,
    LibraryError as LibraryError,
    LibraryNotFound as LibraryNotFound
)
import cucore._options


class ObjectCode:
    """
    Compiled code: bytes, their type, a name and the symbol mapping (name expression -> mangled name). Immutable.
    """

    def __init__(self, code: bytes, code_type: str, name: str = '', symbol_mapping: Mapping[str, str] | None = None) -> None: ...

    @property
    def code(self) -> bytes:
        """The bytes (a copy)."""

    @property
    def code_type(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def tile_ir(self) -> ObjectCode | None:
        """
        The Tile IR NVRTC made in the same compile as this PTX, cubin or LTO-IR (a program with Tile code compiled with enable_tile), an ObjectCode of code_type "tile_ir"; None when it made none.
        """

    @property
    def symbol_mapping(self) -> dict[str | bytes, str]:
        """
        Name expression -> mangled name. A name expression the compile was given as bytes is a bytes key, as in cuda.core.
        """

    def symbol(self, name_or_expression: str | bytes) -> str:
        """
        The mangled name of a name expression this code was compiled with, else the name.
        """

    def __setattr__(self, name: str, value: object, /) -> None:
        """Raises AttributeError: an ObjectCode is immutable."""

    def __len__(self) -> int: ...

    def __bytes__(self) -> bytes: ...

    def __eq__(self, arg: object, /) -> bool: ...

    def __hash__(self) -> int: ...

    def write(self, path: str) -> None:
        """Writes the raw bytes to a file (for cuobjdump, nvdisasm)."""

    def __repr__(self) -> str: ...

class ProgramCache:
    """
    A program cache: a mapping from keys (bytes or str; str is UTF-8) to ObjectCode.

    cache[key] raises KeyError on a miss; get(key) returns None. There is no `in`: a check followed by a read races with other processes; call get() and handle None.
    """

    def __getitem__(self, key: bytes | str, /) -> ObjectCode: ...

    def get(self, key: bytes | str, default: ObjectCode | None = None) -> ObjectCode | None:
        """The entry, or `default` on a miss."""

    def get_bytes(self, key: bytes | str, default: bytes | None = None) -> bytes | None:
        """
        The entry's code as bytes (cuda.core's protocol), or `default` on a miss.
        """

    def __setitem__(self, key: bytes | str, value: ObjectCode | bytes | bytearray | memoryview, /) -> None: ...

    def __delitem__(self, key: bytes | str, /) -> None: ...

    def __contains__(self, arg: object, /) -> bool: ...

    def __len__(self) -> int: ...

    def clear(self) -> None:
        """Removes every entry."""

    def update(self, items: Mapping[bytes | str, ObjectCode | bytes] | Iterable[tuple[bytes | str, ObjectCode | bytes]], /) -> None:
        """Bulk put from a mapping or (key, value) pairs; not transactional."""

    @property
    def size_bytes(self) -> int:
        """Total stored bytes."""

    @property
    def stats(self) -> dict:
        """
        This object's counters: hits, misses, puts, evictions, corrupt_dropped, errors.
        """

    @property
    def persistent_stats(self) -> object:
        """
        The counts the cache keeps in itself, summed over every process that used it (as `cucore cache stats`): {directory, local, remote, compiles, compile_hits, compile_seconds, compile_seconds_saved, skips, shards, shards_ignored}; None for caches that keep none (in-memory, Redis alone).
        """

    def zero_persistent_stats(self) -> None:
        """
        Resets the persistent statistics to zero (as `cucore cache stats --zero`).
        """

    def trim(self, max_size_bytes: int) -> int:
        """
        Evicts least-recently-used entries down to max_size_bytes; returns how many.
        """

    def verify(self, remove_bad: bool = False) -> dict:
        """
        Checks every entry (format, checksum, key); with remove_bad, removes the damaged ones and what is not an entry (a directory, ...) where one belongs, or moves it aside. 'notes': a line for each such thing and what was done.
        """

    @property
    def description(self) -> str: ...

    def __repr__(self) -> str: ...

    def close(self) -> None:
        """
        Releases resources now (also done when the object is collected). Idempotent.
        """

    def __enter__(self) -> object: ...

    def __exit__(self, exc_type: object | None, exc_value: object | None, traceback: object | None) -> None: ...

class InMemoryProgramCache(ProgramCache):
    """
    An in-process LRU cache (thread-safe). A hit hands out the stored ObjectCode, no copy.
    """

    def __init__(self, *, max_size_bytes: int | None = None, max_entries: int | None = None) -> None: ...

class SQLiteProgramCache(ProgramCache):
    """A cache in one SQLite file, shared by threads and processes."""

    def __init__(self, path: str | os.PathLike, *, max_size_bytes: int | None = None, busy_timeout: float = 5.0, on_write_failure: str = 'warn', journal: str = 'auto', shared: bool = False) -> None: ...

    @property
    def path(self) -> str: ...

class FileStreamProgramCache(ProgramCache):
    """
    A cache in a directory of atomically written files, shared by many processes.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, max_size_bytes: int | None = None, fsync: bool = True, on_write_failure: str = 'warn', shared: bool = False) -> None: ...

    @property
    def path(self) -> str: ...

class RedisProgramCache(ProgramCache):
    """
    A cache on a Redis server, shared by machines (docs/cache-remote.md). Misses, not errors, while the server is down; usually the remote tier of a TieredProgramCache.
    """

    def __init__(self, url: str = 'redis://127.0.0.1:6379/0', *, key_prefix: str = 'cucore:v1:', connect_timeout: float = 0.5, command_timeout: float = 0.5, ttl: float | None = None, read_only: bool = False) -> None:
        """
        The URL's query parameters (prefix, ttl, readonly, connect_timeout, command_timeout) override the keyword arguments; timeouts in seconds.
        """

    @property
    def url(self) -> str:
        """The URL with its password replaced by ***."""

    @property
    def key_prefix(self) -> str: ...

    @property
    def read_only(self) -> bool: ...

    def redis_key(self, key: bytes | str) -> str:
        """The Redis key an entry is stored under."""

class TieredProgramCache(ProgramCache):
    """
    A local cache in front of a remote one (docs/cache-remote.md): gets try local, then remote (a remote hit is copied into local); puts go to local, then to remote, in the background with write_behind. Remote errors count as misses. Tiers passed in stay usable on their own and stay open when this cache closes (it flushes); the tiers of one from open_program_cache close with it.
    """

    def __init__(self, local: ProgramCache, remote: ProgramCache, *, write_behind: bool = True, max_pending_puts: int = 256) -> None: ...

    @property
    def local(self) -> ProgramCache: ...

    @property
    def remote(self) -> ProgramCache: ...

    def flush(self) -> None:
        """
        Returns once every earlier put has reached the remote tier (or failed there).
        """

    @property
    def tier_stats(self) -> dict:
        """
        Per-tier counters: local_hits, remote_hits, misses, remote_errors, remote_puts_dropped, remote_puts_pending, and each tier's own stats (local, remote).
        """

def open_program_cache(spec: str) -> InMemoryProgramCache | SQLiteProgramCache | FileStreamProgramCache | RedisProgramCache | TieredProgramCache | None:
    """
    A cache from a spec as the CLI takes it: "memory", "sqlite:FILE", "dir:DIR" or DIR, "none" (None), "redis://...", "LOCAL+redis://..." (tiered). An empty spec is the default directory ($CUCORE_REMOTE_CACHE adds a Redis tier).
    """

def default_cache_dir() -> str:
    """$CUCORE_CACHE_DIR, else $XDG_CACHE_HOME/cucore, else ~/.cache/cucore."""

def export_pack(cache: ProgramCache, path: str | os.PathLike[str], *, keys: Iterable[bytes | str] | None = None, since: datetime.datetime | float | None = None, match: str | None = None, quiet: bool = True) -> dict[str, int]:
    """
    Writes the cache's entries to the pack file `path` (docs/cache-packs.md): all, or the `keys`, or those used since `since` and/or whose program name matches the glob `match`. Streamed, one entry at a time, through a temporary file renamed at the end. A progress bar on a terminal unless quiet. Returns entries, skipped, with_compiler_identity, code_bytes, pack_bytes.
    """

def import_pack(cache: ProgramCache, path: str | os.PathLike[str], *, quiet: bool = True) -> dict[str, int]:
    """
    Adds the pack's entries to the cache: every record is verified first (a damaged or foreign pack raises InvalidArgument naming the record and adds nothing), then each entry whose key the cache lacks is put; one already there is never replaced. Returns entries, added, already_present, bytes_added.
    """

def verify_pack(path: str | os.PathLike[str]) -> dict[str, Any]:
    """
    Verifies every record of the pack without adding anything (InvalidArgument names the first problem). Returns entries, code_bytes, pack_bytes, format_version, cucore_version, created (Unix seconds).
    """

class Program:
    """Source code, its type ("c++", "ptx", "nvvm") and options."""

    def __init__(self, code: str | bytes | bytearray, code_type: str, options: cucore._options.ProgramOptions | Any | None = None) -> None: ...

    def compile(self, target_type: str, name_expressions: Iterable[str | bytes] = (), *, cache: ProgramCache | Any | None = None) -> ObjectCode:
        """
        Compiles to "ptx", "cubin", "ltoir" or "tile_ir" (c++). With a cache: a hit returns the stored code (symbol mapping included), a miss compiles and stores. Raises CompileError with the log when the compiler rejects the code.
        """

    @property
    def log(self) -> str:
        """The log of the last compile."""

    @property
    def backend(self) -> str: ...

    @property
    def code_type(self) -> str: ...

    @property
    def last_cache_outcome(self) -> str:
        """"off", "hit" or "miss": what the last compile found in its cache."""

    @property
    def last_verify(self) -> str:
        """
        Verify mode (ProgramOptions.verify, CUCORE_VERIFY): "not_verified", "verified", "mismatch" (a stale hit caught: its entry removed, the fresh result returned) or "queued" (checked in the background: cucore.wait_for_verification()).
        """

    @property
    def last_flight_outcome(self) -> str | None:
        """
        What single-flight did on the last compile through a cache: "hit", "compiled", "waited" (another process or thread compiled it), "took_over", "gave_up" or "unclaimed"; None without a cache.
        """

    @property
    def last_cache_key(self) -> bytes | None:
        """The key of the last compile through a cache (bytes), or None."""

    @property
    def last_cache_includes(self) -> dict[str, Any] | None:
        """
        What header tracking put into the last cache key: tracked, files, absent, in_memory, hashed, reused_walk, stat_fast_path, vouched; None without a cache.
        """

def make_program_cache_key(*, code: str | bytes | bytearray, code_type: str, options: cucore._options.ProgramOptions | Any | None, target_type: str, name_expressions: Iterable[str | bytes] = (), extra_digest: bytes | bytearray | memoryview | str | None = None, cache: ProgramCache | None = None) -> bytes:
    """
    The 32-byte key of a compilation (cuda.core's signature; options may be cucore's or cuda.core's ProgramOptions). With `cache`, compiler versions come from its memo.
    """

def explain_program_cache_key(*, code: str | bytes | bytearray, code_type: str, options: cucore._options.ProgramOptions | Any | None, target_type: str, name_expressions: Iterable[str | bytes] = (), extra_digest: bytes | bytearray | memoryview | str | None = None, cache: ProgramCache | None = None) -> list[tuple[str, str]]:
    """
    The labelled fields that make_program_cache_key hashes, in order: (label, payload).
    """

def wait_for_verification() -> None:
    """
    Waits until every cache hit queued for verification in the background (Program.last_verify "queued") has been checked; their findings are in the cache's stats and the log.
    """
