"""cucore's Redis and tiered caches from Python, against a real redis-server started per test on a
free loopback port (skipped where redis-server is not installed; scripts/setup.sh installs it).
The oracle is the compiler: what comes back from a cache equals an uncached compile."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

import cucore

ARCH = "sm_80"
SRC = 'extern "C" __global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture
def redis_url(tmp_path):
    """redis://127.0.0.1:<port>/0 of a fresh redis-server (no persistence), killed afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")
    for _ in range(3):  # another process may take the free port before the server binds it
        port = _free_port()
        log = open(tmp_path / "redis.log", "ab")
        server = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(tmp_path), "--loglevel", "warning"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and server.poll() is None and not _answers(port):
            time.sleep(0.02)
        if server.poll() is None and _answers(port):
            try:
                yield f"redis://127.0.0.1:{port}/0"
            finally:
                server.kill()
                server.wait()
                log.close()
            return
        server.kill()
        server.wait()
        log.close()
    pytest.fail("redis-server did not start: " + (tmp_path / "redis.log").read_text())


def compile_ptx(cache=None):
    program = cucore.Program(SRC, "c++", cucore.ProgramOptions(arch=ARCH))
    return program, program.compile("ptx", cache=cache)


def test_redis_miss_compiles_and_stores_hit_returns_the_compilers_bytes(redis_url):
    _, oracle = compile_ptx()
    with cucore.RedisProgramCache(redis_url) as cache:
        first_program, first = compile_ptx(cache)
        assert first_program.last_cache_outcome == "miss"
        second_program, second = compile_ptx(cache)
        assert second_program.last_cache_outcome == "hit"
        assert bytes(first.code) == bytes(second.code) == bytes(oracle.code)
        assert len(cache) == 1 and cache.stats["hits"] == 1 and cache.stats["puts"] == 1
        assert cache.redis_key(second_program.last_cache_key).startswith("cucore:v1:")


def test_redis_mapping_protocol(redis_url):
    with cucore.RedisProgramCache(redis_url, key_prefix="py:") as cache:
        assert cache.key_prefix == "py:" and not cache.read_only
        cache[b"k"] = b"\x01\x02"
        assert cache.get_bytes("k") == b"\x01\x02"
        with pytest.raises(KeyError):
            cache[b"absent"]
        assert cache.get(b"absent") is None
        del cache[b"k"]
        with pytest.raises(KeyError):
            del cache[b"k"]
        cache.update({b"a": b"1", b"b": b"2"})
        assert len(cache) == 2
        cache.clear()
        assert len(cache) == 0


def test_redis_url_password_is_redacted_and_a_down_server_is_a_miss():
    port = _free_port()  # nothing listens there
    with cucore.RedisProgramCache(f"redis://:hunter2@127.0.0.1:{port}/0", connect_timeout=0.1) as cache:
        assert "hunter2" not in cache.url and "***" in cache.url
        assert "hunter2" not in repr(cache)
        assert cache.get(b"k") is None
        cache[b"k"] = b"v"  # dropped, not raised: the remote tier is best effort
        assert cache.stats["errors"] >= 1


def test_redis_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="connect_timeout"):
        cucore.RedisProgramCache("redis://127.0.0.1:1/0", connect_timeout=0)
    with pytest.raises(ValueError, match="ttl"):
        cucore.RedisProgramCache("redis://127.0.0.1:1/0", ttl=0)
    with pytest.raises(ValueError):
        cucore.RedisProgramCache("http://127.0.0.1:1/0")


def test_tiered_put_reaches_both_tiers_and_a_fresh_local_is_backfilled(redis_url, tmp_path):
    _, oracle = compile_ptx()
    remote = cucore.RedisProgramCache(redis_url)
    local = cucore.InMemoryProgramCache()
    with cucore.TieredProgramCache(local, remote) as tiered:
        assert tiered.local is local and tiered.remote is remote
        program, _ = compile_ptx(tiered)
        key = program.last_cache_key
        tiered.flush()
        assert bytes(local[key].code) == bytes(remote[key].code) == bytes(oracle.code)
    # Closing the tiered cache leaves its tiers open: they belong to their own objects.
    assert len(remote) == 1

    fresh_local = cucore.FileStreamProgramCache(tmp_path / "dir", fsync=False)
    with cucore.TieredProgramCache(fresh_local, remote, write_behind=False) as tiered:
        program, code = compile_ptx(tiered)
        assert program.last_cache_outcome == "hit"
        assert bytes(code.code) == bytes(oracle.code)
        stats = tiered.tier_stats
        assert stats["remote_hits"] == 1 and stats["local_hits"] == 0 and stats["misses"] == 0
        assert bytes(fresh_local[key].code) == bytes(oracle.code)  # backfilled
        assert "redis" in tiered.description
    remote.close()


def test_tiered_survives_its_tiers_python_names(redis_url):
    tiered = cucore.TieredProgramCache(cucore.InMemoryProgramCache(), cucore.RedisProgramCache(redis_url))
    tiered[b"k"] = b"v"  # the tiers have no other reference: the tiered cache keeps them alive
    tiered.flush()
    assert tiered.remote.get_bytes(b"k") == b"v"
    tiered.close()


def test_tiered_takes_only_cucore_caches():
    with pytest.raises(TypeError, match="local"):
        cucore.TieredProgramCache({}, cucore.InMemoryProgramCache())
    with pytest.raises(ValueError, match="max_pending_puts"):
        cucore.TieredProgramCache(cucore.InMemoryProgramCache(), cucore.InMemoryProgramCache(),
                                  max_pending_puts=0)


def test_open_program_cache_gives_the_redis_classes(redis_url):
    with cucore.open_program_cache(redis_url) as cache:
        assert isinstance(cache, cucore.RedisProgramCache)
    with cucore.open_program_cache("memory+" + redis_url) as cache:
        assert isinstance(cache, cucore.TieredProgramCache)
        assert isinstance(cache.local, cucore.InMemoryProgramCache)
        assert isinstance(cache.remote, cucore.RedisProgramCache)
        cache[b"k"] = b"v"
        cache.flush()
        assert cache.remote.get_bytes(b"k") == b"v"


def test_cuda_core_compiles_through_the_tiered_cache(redis_url, tmp_path):
    core = pytest.importorskip("cuda.core")
    from cuda.core.utils import ProgramCacheResource

    from cucore import cuda_core as cc

    def program():
        return core.Program(SRC, "c++", core.ProgramOptions(arch=ARCH))

    oracle = program().compile("cubin")
    local = cc.FileStreamProgramCache(tmp_path / "dir", fsync=False)
    remote = cc.RedisProgramCache(redis_url)
    with cc.TieredProgramCache(local, remote) as cache:
        assert isinstance(cache, ProgramCacheResource) and isinstance(remote, ProgramCacheResource)
        first = program().compile("cubin", cache=cache)
        cache.flush()
        assert len(remote) == 1
        second = program().compile("cubin", cache=cache)
        assert cache.stats["hits"] == 1
        assert bytes(first.code) == bytes(second.code) == bytes(oracle.code)
    remote.close()
    local.close()
