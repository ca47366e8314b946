"""cuda.core's program-cache behaviour (tests/test_program_cache.py upstream), run the same way
against cuda.core's own caches and against cucore's caches wrapped for cuda.core: the same
operations must give the same results."""

from __future__ import annotations

import multiprocessing
import time

import pytest

# cuda.core is a test requirement (setup.sh installs it): a missing one fails, never skips.
from cuda.core import ObjectCode
from cuda.core import utils as cc_utils

import cucore
from conftest import run_in_threads, run_processes
from cucore import cuda_core as cc

BACKENDS = ["cuda.core-memory", "cuda.core-directory", "cucore-memory", "cucore-directory", "cucore-sqlite"]
PERSISTENT = ["cuda.core-directory", "cucore-directory", "cucore-sqlite"]


def open_cache(backend, tmp_path, **kw):
    if backend == "cuda.core-memory":
        return cc_utils.InMemoryProgramCache(**kw)
    if backend == "cuda.core-directory":
        return cc_utils.FileStreamProgramCache(tmp_path / "cc-dir", **kw)
    if backend == "cucore-memory":
        return cc.InMemoryProgramCache(**kw)
    if backend == "cucore-directory":
        return cc.FileStreamProgramCache(tmp_path / "cucore-dir", fsync=False, **kw)
    if backend == "cucore-sqlite":
        return cc.SQLiteProgramCache(tmp_path / "cucore.db", **kw)
    raise AssertionError(backend)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def cache(backend, tmp_path):
    with open_cache(backend, tmp_path) as c:
        yield c


def test_is_a_program_cache_resource(cache):
    assert isinstance(cache, cc_utils.ProgramCacheResource)


def test_empty_on_create(cache):
    assert len(cache) == 0
    assert cache.get(b"k") is None
    with pytest.raises(KeyError):
        cache[b"k"]


def test_roundtrip_object_code(cache):
    obj = ObjectCode.from_cubin(b"\x7fELF-not-really-a-cubin", name="n")
    cache[b"k"] = obj
    assert cache[b"k"] == b"\x7fELF-not-really-a-cubin"
    assert isinstance(cache[b"k"], bytes)


def test_accepts_bytes_bytearray_memoryview_equivalently(cache):
    payload = b"payload \x00\x01\x02"
    cache[b"a"] = payload
    cache[b"b"] = bytearray(payload)
    cache[b"c"] = memoryview(payload)
    assert cache[b"a"] == cache[b"b"] == cache[b"c"] == payload


def test_returns_bytes_verbatim(cache):
    payload = bytes(range(256)) * 7
    cache[b"k"] = payload
    assert cache[b"k"] == payload


def test_accepts_path_backed_object_code(cache, tmp_path):
    path = tmp_path / "k.cubin"
    path.write_bytes(b"from a file")
    cache[b"k"] = ObjectCode.from_cubin(str(path))
    path.unlink()  # the entry holds the bytes, not the path
    assert cache[b"k"] == b"from a file"


def test_path_backed_object_code_missing_file(cache, tmp_path):
    missing = ObjectCode.from_cubin(str(tmp_path / "gone.cubin"))
    with pytest.raises(FileNotFoundError, match="gone.cubin"):
        cache[b"k"] = missing
    assert len(cache) == 0


def test_str_and_bytes_keys_alias(cache):
    cache["k"] = b"v"
    assert cache[b"k"] == b"v"
    cache[b"k2"] = b"w"
    assert cache["k2"] == b"w"


@pytest.mark.parametrize("key", [123, 1.5, object(), None])
def test_rejects_non_str_non_bytes_key(cache, key):
    with pytest.raises(TypeError):
        cache[key] = b"v"
    with pytest.raises(TypeError):
        cache[key]


@pytest.mark.parametrize("value", ["text", 123, None, [1, 2]])
def test_rejects_non_bytes_non_object_code_value(cache, value):
    with pytest.raises(TypeError):
        cache[b"k"] = value
    assert len(cache) == 0


def test_delete(cache):
    cache[b"k"] = b"v"
    del cache[b"k"]
    assert cache.get(b"k") is None
    with pytest.raises(KeyError):
        del cache[b"k"]


def test_overwrite_replaces_value(cache):
    cache[b"k"] = b"first"
    cache[b"k"] = b"second, longer"
    assert cache[b"k"] == b"second, longer"
    assert len(cache) == 1


def test_len_counts_all(cache):
    for i in range(5):
        cache[f"k{i}"] = b"v" * i
    assert len(cache) == 5


def test_clear(cache):
    for i in range(3):
        cache[f"k{i}"] = b"v"
    cache.clear()
    assert len(cache) == 0
    assert cache.get(b"k0") is None


def test_get_returns_default_on_miss_and_value_on_hit(cache):
    assert cache.get(b"k", b"dflt") == b"dflt"
    cache[b"k"] = b"v"
    assert cache.get(b"k", b"dflt") == b"v"


def test_update_accepts_mapping_and_pairs(cache):
    cache.update({b"a": b"1", "b": b"2"})
    cache.update([(b"c", b"3"), ("d", bytearray(b"4"))])
    assert [cache[k] for k in (b"a", b"b", b"c", b"d")] == [b"1", b"2", b"3", b"4"]


def test_handles_long_keys(cache):
    key = b"k" * 10_000
    cache[key] = b"v"
    assert cache[key] == b"v"


@pytest.mark.parametrize("cap", [0, -1])
def test_rejects_non_positive_size_cap(backend, tmp_path, cap):
    with pytest.raises(ValueError):
        open_cache(backend, tmp_path, max_size_bytes=cap)


def test_context_manager_closes(backend, tmp_path):
    with open_cache(backend, tmp_path) as c:
        c[b"k"] = b"v"
    # cuda.core's caches and cucore's in-memory one hold nothing to close; cucore's persistent
    # caches refuse use after close.
    if backend in ("cucore-directory", "cucore-sqlite"):
        with pytest.raises(cucore.Error):
            c[b"k"] = b"v"


@pytest.mark.parametrize("backend", PERSISTENT)
def test_persists_across_reopen(backend, tmp_path):
    with open_cache(backend, tmp_path) as c:
        c[b"k"] = b"persisted"
    with open_cache(backend, tmp_path) as c:
        assert c[b"k"] == b"persisted"
        assert len(c) == 1


@pytest.mark.parametrize("backend", ["cuda.core-memory", "cucore-memory"])
def test_in_memory_size_cap_evicts_oldest_and_read_promotes(backend, tmp_path):
    c = open_cache(backend, tmp_path, max_size_bytes=300)
    c[b"a"] = b"a" * 100
    c[b"b"] = b"b" * 100
    c[b"c"] = b"c" * 100
    assert c[b"a"] == b"a" * 100  # promotes a: b is now the oldest
    c[b"d"] = b"d" * 100
    assert c.get(b"b") is None
    assert [c.get(k) is not None for k in (b"a", b"c", b"d")] == [True, True, True]
    c[b"huge"] = b"h" * 301  # larger than the cap: evicts itself
    assert c.get(b"huge") is None


@pytest.mark.parametrize("backend", ["cuda.core-directory", "cucore-directory"])
def test_directory_size_cap_evicts_least_recently_read(backend, tmp_path):
    # cucore records a read at most once a second per entry (it saves a metadata write on hot
    # entries), so the uses are a second apart. Entries are 2000 bytes (cucore adds a header):
    # the cap is crossed at the 9th or 10th entry.
    c = open_cache(backend, tmp_path, max_size_bytes=19_000)
    c[b"first"] = b"f" * 2000
    time.sleep(1.1)
    for i in range(4):
        c[f"k{i}"] = bytes([i]) * 2000
    time.sleep(1.1)
    assert c[b"first"] == b"f" * 2000  # now more recent than k0..k3
    for i in range(4, 9):
        c[f"k{i}"] = bytes([i]) * 2000
    assert c.get(b"first") == b"f" * 2000
    assert c.get(b"k0") is None
    assert c.get(b"k8") == bytes([8]) * 2000
    assert len(c) < 10


def test_sqlite_size_cap_is_hard(tmp_path):
    c = open_cache("cucore-sqlite", tmp_path, max_size_bytes=20_000)
    for i in range(30):
        c[f"k{i}"] = bytes([i]) * 2000
        assert c.native.size_bytes <= 20_000
    assert c.get(b"k29") == bytes([29]) * 2000
    assert len(c) < 10


@pytest.mark.parametrize("backend", ["cuda.core-memory", "cucore-memory"])
def test_in_memory_concurrent_threads_stay_consistent(backend, tmp_path):
    c = open_cache(backend, tmp_path, max_size_bytes=50 * 64)

    def work(t):
        for i in range(500):
            key = f"{t}-{i % 80}".encode()
            value = key.ljust(64, b".")  # 64 bytes: the cap holds 50
            c[key] = value
            got = c.get(key)
            assert got is None or got == value

    assert run_in_threads(work, 4) == []
    assert 0 < len(c) <= 50


def _writer(backend, root, worker, count):
    import pathlib

    c = open_cache(backend, pathlib.Path(root))
    for i in range(count):
        c[f"w{worker}-{i}"] = f"payload {worker} {i}".encode()
    c.close()


@pytest.mark.parametrize("backend", PERSISTENT)
def test_concurrent_writers_distinct_keys_all_survive(backend, tmp_path):
    open_cache(backend, tmp_path).close()  # create it once, as upstream's test does
    exit_codes = run_processes(_writer, [(backend, str(tmp_path), w, 25) for w in range(4)])
    assert exit_codes == [0] * 4
    with open_cache(backend, tmp_path) as c:
        assert len(c) == 100
        for w in range(4):
            for i in range(25):
                assert c[f"w{w}-{i}"] == f"payload {w} {i}".encode()


def _same_key_writer(backend, root, worker):
    import pathlib

    c = open_cache(backend, pathlib.Path(root))
    for _ in range(20):
        c[b"shared"] = f"writer {worker} ".encode() * 100
    c.close()


@pytest.mark.parametrize("backend", PERSISTENT)
def test_concurrent_writers_same_key_no_corruption(backend, tmp_path):
    open_cache(backend, tmp_path).close()
    exit_codes = run_processes(_same_key_writer, [(backend, str(tmp_path), w) for w in range(6)])
    assert exit_codes == [0] * 6
    with open_cache(backend, tmp_path) as c:
        assert c[b"shared"] in {f"writer {w} ".encode() * 100 for w in range(6)}
        assert len(c) == 1


def _churner(backend, root, stop_after):
    import pathlib

    c = open_cache(backend, pathlib.Path(root))
    for i in range(stop_after):
        c[f"churn{i % 10}"] = bytes([i % 251]) * (1000 + i % 997)
    c.close()


@pytest.mark.parametrize("backend", PERSISTENT)
def test_concurrent_reader_never_sees_torn_entry(backend, tmp_path):
    with open_cache(backend, tmp_path) as c:
        c[b"stable"] = b"S" * 5000
    ctx = multiprocessing.get_context("spawn")
    writer = ctx.Process(target=_churner, args=(backend, str(tmp_path), 300))
    writer.start()
    hits = mismatches = 0
    with open_cache(backend, tmp_path) as c:
        for _ in range(200):
            got = c.get(b"stable")
            hits += got is not None
            mismatches += got is not None and got != b"S" * 5000
            for i in range(10):
                churned = c.get(f"churn{i}")
                # every value a reader sees is one some writer stored whole
                assert churned is None or churned == churned[:1] * len(churned)
    writer.join(120)
    assert writer.exitcode == 0
    assert (hits, mismatches) == (200, 0)
