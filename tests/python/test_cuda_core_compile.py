"""cuda.core's Program.compile(..., cache=...) with cucore's caches (upstream's
tests/test_program_compile_cache.py, the parts that run without a GPU)."""

from __future__ import annotations

import pytest

# cuda.core is a test requirement (setup.sh installs it): a missing one fails, never skips.
from cuda.core import Program, ProgramOptions
from cuda.core import utils as cc_utils

from cucore import cuda_core as cc

SRC = 'extern "C" __global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }'
ARCH = "sm_80"


@pytest.fixture(params=["memory", "directory", "sqlite"])
def cache(request, tmp_path):
    if request.param == "memory":
        c = cc.InMemoryProgramCache()
    elif request.param == "directory":
        c = cc.FileStreamProgramCache(tmp_path / "d")
    else:
        c = cc.SQLiteProgramCache(tmp_path / "c.db")
    with c:
        yield c


def program(**kw):
    return Program(SRC, "c++", ProgramOptions(arch=ARCH, **kw))


def test_miss_compiles_and_stores_hit_returns_byte_equal_object_code(cache):
    oracle = program().compile("cubin")
    first = program().compile("cubin", cache=cache)
    assert len(cache) == 1 and cache.stats["puts"] == 1
    second = program().compile("cubin", cache=cache)
    assert cache.stats["hits"] == 1 and cache.stats["puts"] == 1
    assert bytes(first.code) == bytes(second.code) == bytes(oracle.code)
    assert second.code_type == "cubin" and second.name == first.name


def test_the_stored_entry_keeps_cuda_core_metadata(cache):
    obj = program(name="mine").compile("cubin", cache=cache)
    key = cc_utils.make_program_cache_key(code=SRC, code_type="c++",
                                         options=ProgramOptions(arch=ARCH, name="mine"),
                                         target_type="cubin")
    native = cache.native[key]
    assert (native.code_type, native.name, native.code) == ("cubin", "mine", bytes(obj.code))


def test_roundtrip_across_reopen(tmp_path):
    for make in (lambda: cc.FileStreamProgramCache(tmp_path / "d"),
                 lambda: cc.SQLiteProgramCache(tmp_path / "c.db")):
        with make() as c:
            first = program().compile("cubin", cache=c)
        with make() as c:
            again = program().compile("cubin", cache=c)
            assert c.stats["hits"] == 1 and c.stats["puts"] == 0
        assert bytes(again.code) == bytes(first.code)


def test_cuda_core_rules_still_apply(cache):
    # cuda.core itself refuses these before touching the cache; cucore's caches change nothing.
    with pytest.raises(ValueError):
        Program("template<class T> __global__ void k(T*){}", "c++",
                ProgramOptions(arch=ARCH)).compile("cubin", name_expressions=["k<int>"], cache=cache)
    with pytest.raises(ValueError):
        program(include_path=["/tmp"]).compile("cubin", cache=cache)
    assert len(cache) == 0


def test_compile_failure_does_not_store(cache):
    with pytest.raises(Exception):  # noqa: B017 - cuda.core's NVRTC error type
        Program("__global__ void broken( {", "c++", ProgramOptions(arch=ARCH)).compile("cubin", cache=cache)
    assert len(cache) == 0


def test_cache_must_be_a_program_cache_resource():
    # What makes the drop-in necessary: a duck-typed mapping is refused by cuda.core.
    with pytest.raises(TypeError):
        program().compile("cubin", cache={})


def test_wrap_shares_a_native_cache():
    import cucore

    native = cucore.InMemoryProgramCache()
    wrapped = cc.wrap(native)
    program().compile("cubin", cache=wrapped)
    assert len(native) == 1
    # The same storage serves cucore's own Program through the wrapper.
    prog = cucore.Program(SRC, "c++", cucore.ProgramOptions(arch=ARCH))
    prog.compile("cubin", cache=wrapped)
    assert prog.last_cache_outcome == "miss"  # cucore's key differs from cuda.core's
    prog.compile("cubin", cache=wrapped)
    assert prog.last_cache_outcome == "hit"
    assert len(native) == 2
    with pytest.raises(TypeError):
        cc.wrap({})


@pytest.mark.parametrize("target", ["cubin", "ptx", "ltoir"])
def test_to_object_code_keeps_bytes_type_name_and_symbols(target):
    import cucore

    src = "template<class T> __global__ void k(T* x) { *x = 1; }"
    obj = cucore.Program(src, "c++", cucore.ProgramOptions(arch=ARCH, name="mine")).compile(
        target, ["k<float>"])
    theirs = cc.to_object_code(obj)
    assert (bytes(theirs.code), theirs.code_type, theirs.name) == (obj.code, target, "mine")
    assert theirs.symbol_mapping == {"k<float>": obj.symbol("k<float>")}
    # and it goes into cuda.core's own cache like any cuda.core ObjectCode
    cache = cc_utils.InMemoryProgramCache()
    cache[b"k"] = theirs
    assert cache[b"k"] == obj.code
    with pytest.raises(TypeError):
        cc.to_object_code(b"bytes")
