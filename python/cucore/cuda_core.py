"""cucore's caches as ``cuda.core`` program caches.

``cuda.core``'s ``Program.compile(..., cache=...)`` takes an instance of
``cuda.core.utils.ProgramCacheResource``: a bytes-in/bytes-out mapping. The classes here are such
subclasses, each wrapping one of cucore's native caches (``.native``)::

    from cuda.core import Program, ProgramOptions
    from cucore.cuda_core import FileStreamProgramCache

    with FileStreamProgramCache("/tmp/kernels") as cache:
        obj = Program(src, "c++", ProgramOptions(arch="sm_90")).compile("cubin", cache=cache)

Values stored through ``cuda.core`` keep their code type, name and symbol mapping on cucore's side
(``cache.native[key]``); reads return the code bytes as ``cuda.core`` expects. The module exports
what ``cuda.core.utils`` does for program caches (``ProgramCacheResource`` is cuda.core's own
class), so ``from cuda.core.utils import ...`` becomes ``from cucore.cuda_core import ...``.
Importing this module needs ``cuda.core`` (``pip install cuda-core``); ``import cucore`` does not.
"""

from __future__ import annotations

import os
from typing import Any

try:
    from cuda.core import ObjectCode as _CudaCoreObjectCode
    from cuda.core.utils import ProgramCacheResource
except ImportError as exc:  # pragma: no cover - exercised only without cuda.core
    raise ImportError(
        "cucore.cuda_core needs cuda.core (pip install cuda-core); the rest of cucore does not"
    ) from exc

from cucore import _cucore
from cucore._cucore import make_program_cache_key

__all__ = [
    "FileStreamProgramCache",
    "InMemoryProgramCache",
    "ProgramCacheResource",
    "RedisProgramCache",
    "SQLiteProgramCache",
    "TieredProgramCache",
    "make_program_cache_key",
    "to_object_code",
    "wrap",
]


class _CucoreCache(ProgramCacheResource):
    """A cuda.core ProgramCacheResource backed by a native cucore cache."""

    _native: _cucore.ProgramCache

    @property
    def native(self) -> _cucore.ProgramCache:
        """The wrapped cucore cache (values as cucore.ObjectCode, stats, trim, verify)."""
        return self._native

    def __getitem__(self, key: bytes | str) -> bytes:
        data = self._native.get_bytes(key)
        if data is None:
            raise KeyError(key)
        return data

    def get(self, key: bytes | str, default: bytes | None = None) -> bytes | None:
        return self._native.get_bytes(key, default)

    def __setitem__(self, key: bytes | str, value: Any) -> None:
        self._native[key] = value

    def __delitem__(self, key: bytes | str) -> None:
        del self._native[key]

    def __len__(self) -> int:
        return len(self._native)

    def clear(self) -> None:
        self._native.clear()

    def update(self, items: Any, /) -> None:
        self._native.update(items)

    def close(self) -> None:
        self._native.close()

    @property
    def stats(self) -> dict[str, int]:
        return self._native.stats

    def __repr__(self) -> str:
        return f"<cucore.cuda_core.{type(self).__name__} {self._native.description}>"


class InMemoryProgramCache(_CucoreCache):
    """cucore's in-memory LRU cache (``max_size_bytes``, ``max_entries``) for cuda.core."""

    def __init__(self, *, max_size_bytes: int | None = None, max_entries: int | None = None):
        self._native = _cucore.InMemoryProgramCache(
            max_size_bytes=max_size_bytes, max_entries=max_entries
        )


class FileStreamProgramCache(_CucoreCache):
    """cucore's directory cache for cuda.core. ``path=None`` is cucore.default_cache_dir()."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_size_bytes: int | None = None,
        fsync: bool = True,
        on_write_failure: str = "warn",
    ):
        self._native = _cucore.FileStreamProgramCache(
            None if path is None else os.fspath(path),
            max_size_bytes=max_size_bytes,
            fsync=fsync,
            on_write_failure=on_write_failure,
        )


class SQLiteProgramCache(_CucoreCache):
    """cucore's single-file SQLite cache for cuda.core."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_size_bytes: int | None = None,
        busy_timeout: float = 5.0,
        on_write_failure: str = "warn",
        journal: str = "auto",
    ):
        self._native = _cucore.SQLiteProgramCache(
            os.fspath(path),
            max_size_bytes=max_size_bytes,
            busy_timeout=busy_timeout,
            on_write_failure=on_write_failure,
            journal=journal,
        )


class RedisProgramCache(_CucoreCache):
    """cucore's Redis cache (docs/cache-remote.md) for cuda.core; usually a TieredProgramCache's
    remote tier."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        key_prefix: str = "cucore:v1:",
        connect_timeout: float = 0.5,
        command_timeout: float = 0.5,
        ttl: float | None = None,
        read_only: bool = False,
    ):
        self._native = _cucore.RedisProgramCache(
            url,
            key_prefix=key_prefix,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            ttl=ttl,
            read_only=read_only,
        )


class TieredProgramCache(_CucoreCache):
    """cucore's tiered cache for cuda.core: ``local`` in front of ``remote``, each a cucore cache
    (native, or one of this module's). The tiers stay usable on their own."""

    def __init__(
        self,
        local: Any,
        remote: Any,
        *,
        write_behind: bool = True,
        max_pending_puts: int = 256,
    ):
        self._native = _cucore.TieredProgramCache(
            local, remote, write_behind=write_behind, max_pending_puts=max_pending_puts
        )

    def flush(self) -> None:
        """Returns once every earlier put has reached the remote tier."""
        self._native.flush()


def wrap(cache: _cucore.ProgramCache) -> _CucoreCache:
    """A cuda.core ProgramCacheResource over an existing cucore cache (shared, not copied)."""
    if not isinstance(cache, _cucore.ProgramCache):
        raise TypeError(f"wrap() takes a cucore cache, got {type(cache).__name__}")
    wrapper = _CucoreCache.__new__(_CucoreCache)
    wrapper._native = cache
    return wrapper


def to_object_code(code: _cucore.ObjectCode) -> _CudaCoreObjectCode:
    """A cuda.core ObjectCode with the same bytes, type, name and symbol mapping.

    For code cucore compiled (with include paths or name expressions through a cache, which
    cuda.core's own cache refuses) and cuda.core then loads and launches:
    ``to_object_code(obj).get_kernel("scale<float>")`` on a GPU.
    """
    if not isinstance(code, _cucore.ObjectCode):
        raise TypeError(f"to_object_code() takes a cucore.ObjectCode, got {type(code).__name__}")
    make = getattr(_CudaCoreObjectCode, f"from_{code.code_type}", None)
    if make is None:  # "tile_ir": cuda.core has no ObjectCode for Tile IR
        raise ValueError(f"cuda.core's ObjectCode has no from_{code.code_type}: convert the PTX or cubin "
                         "compiled alongside it instead")
    return make(code.code, name=code.name, symbol_mapping=dict(code.symbol_mapping) or None)
