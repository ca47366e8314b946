"""cucore's own Python API: Program, ObjectCode, the native caches, the key, errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cucore
from conftest import ARCH, KERNEL


def compile_uncached(options, target="cubin", names=()):
    return cucore.Program(KERNEL, "c++", options).compile(target, names)


@pytest.mark.parametrize("target", ["cubin", "ptx", "ltoir"])
def test_cached_compile_equals_uncached_compile(native_cache, options, target):
    """The oracle rule: what comes out of the cache is byte-for-byte what the compiler makes."""
    oracle = compile_uncached(options, target, ["scale<float>"])
    program = cucore.Program(KERNEL, "c++", options)
    miss = program.compile(target, ["scale<float>"], cache=native_cache)
    assert program.last_cache_outcome == "miss"
    assert program.last_flight_outcome == "compiled"  # single-flight: it held the claim
    hit = program.compile(target, ["scale<float>"], cache=native_cache)
    assert program.last_cache_outcome == "hit"
    assert program.last_flight_outcome == "hit"
    assert miss.code == oracle.code == hit.code
    assert hit.code_type == target
    # Name expressions survive the cache (cuda.core refuses them with a cache).
    assert hit.symbol_mapping == oracle.symbol_mapping
    assert hit.symbol("scale<float>") == oracle.symbol("scale<float>") != "scale<float>"


def stored_then_hit(make, options, oracle):
    """KERNEL compiled through one cache object from make(), then a hit with the oracle's code
    through a fresh one over the same storage; the second object's stats."""
    with make() as cache:
        cucore.Program(KERNEL, "c++", options).compile("cubin", cache=cache)
    with make() as cache:
        program = cucore.Program(KERNEL, "c++", options)
        assert program.compile("cubin", cache=cache).code == oracle.code
        assert program.last_cache_outcome == "hit"
        return cache.stats


def test_hit_in_a_fresh_cache_object_over_the_same_storage(tmp_path, options):
    oracle = compile_uncached(options)
    for make in (lambda: cucore.FileStreamProgramCache(tmp_path / "d"),
                 lambda: cucore.SQLiteProgramCache(tmp_path / "c.db")):
        assert stored_then_hit(make, options, oracle)["hits"] == 1


def test_persistent_stats_count_across_cache_objects_and_zero(tmp_path, options):
    for make in (lambda: cucore.FileStreamProgramCache(tmp_path / "d"),
                 lambda: cucore.SQLiteProgramCache(tmp_path / "c.db")):
        with make() as cache:
            cucore.Program(KERNEL, "c++", options).compile("cubin", cache=cache)
        with make() as cache:
            cucore.Program(KERNEL, "c++", options).compile("cubin", cache=cache)
            stats = cache.persistent_stats
            assert stats["local"]["hits"] == 1 and stats["local"]["misses"] == 1
            assert stats["local"]["puts"] == 1 and stats["remote"]["hits"] == 0
            assert stats["compiles"] == 1 and stats["compile_hits"] == 1
            assert stats["compile_seconds"] > 0
            assert stats["compile_seconds_saved"] == pytest.approx(stats["compile_seconds"])
            assert stats["skips"] == {"needs_extra_digest": 0, "uncacheable_options": 0,
                                      "header_changed": 0, "time_macros": 0,
                                      "compiler_environment": 0, "header_too_new": 0,
                                      "unkeyed_input": 0, "process_view_input": 0,
                                      "option_file": 0}
            cache.zero_persistent_stats()
            assert cache.persistent_stats["local"]["hits"] == 0
            assert cache.persistent_stats["compile_seconds_saved"] is None
    memory = cucore.InMemoryProgramCache()
    assert memory.persistent_stats is None
    with pytest.raises(ValueError, match="no persistent statistics"):
        memory.zero_persistent_stats()


def test_last_cache_key_is_make_program_cache_key(native_cache, options):
    program = cucore.Program(KERNEL, "c++", options)
    program.compile("cubin", ["scale<float>"], cache=native_cache)
    key = cucore.make_program_cache_key(code=KERNEL, code_type="c++", options=options,
                                        target_type="cubin", name_expressions=["scale<float>"],
                                        cache=native_cache)
    assert program.last_cache_key == key
    assert native_cache[key].code == program.compile("cubin", ["scale<float>"]).code


def test_native_cache_mapping_api(native_cache):
    obj = cucore.ObjectCode(b"\x7fELF...", "cubin", name="k", symbol_mapping={"f<int>": "_Z1fIiEvv"})
    native_cache["k"] = obj
    got = native_cache[b"k"]
    assert got == obj
    assert (got.code, got.code_type, got.name, got.symbol_mapping) == (
        b"\x7fELF...", "cubin", "k", {"f<int>": "_Z1fIiEvv"})
    assert native_cache.get_bytes("k") == b"\x7fELF..."
    assert len(native_cache) == 1 and native_cache.size_bytes > 0
    with pytest.raises(KeyError):
        native_cache[b"missing"]
    assert native_cache.get(b"missing") is None
    with pytest.raises(TypeError, match="no `in`"):
        b"k" in native_cache  # noqa: B015
    del native_cache["k"]
    with pytest.raises(KeyError):
        del native_cache["k"]
    stats = native_cache.stats
    assert stats["puts"] == 1 and stats["hits"] >= 2 and stats["misses"] >= 1
    assert native_cache.verify() ["corrupt"] == 0


def test_open_program_cache_specs(tmp_path):
    assert isinstance(cucore.open_program_cache("memory"), cucore.InMemoryProgramCache)
    assert isinstance(cucore.open_program_cache(f"sqlite:{tmp_path}/c.db"), cucore.SQLiteProgramCache)
    assert isinstance(cucore.open_program_cache(f"dir:{tmp_path}/d"), cucore.FileStreamProgramCache)
    assert cucore.open_program_cache("none") is None
    with pytest.raises(ValueError):
        cucore.open_program_cache("sqlite:")


def test_read_only_layers_are_read_and_never_written(tmp_path):
    """LOCAL+ro:DIR (docs/cache-layers.md): a hit from the layer is backfilled into LOCAL; a miss is
    stored in LOCAL only; the layer's files are untouched."""
    with cucore.open_program_cache(f"dir:{tmp_path}/layer") as writer:
        filled = cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH)).compile("ptx", cache=writer)
    before = sorted((p, p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ctime_ns)
                    for p in (tmp_path / "layer").rglob("*"))
    with cucore.open_program_cache(f"dir:{tmp_path}/local+ro:{tmp_path}/layer") as cache:
        program = cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH))
        assert program.compile("ptx", cache=cache).code == filled.code
        assert program.last_cache_outcome == "hit"
        other = cucore.Program(KERNEL + "\n// another", "c++", cucore.ProgramOptions(arch=ARCH))
        other.compile("ptx", cache=cache)
        assert other.last_cache_outcome == "miss"
    assert len(list((tmp_path / "local" / "entries").rglob("*/*"))) == 2
    after = sorted((p, p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ctime_ns)
                   for p in (tmp_path / "layer").rglob("*"))
    assert after == before
    alone = cucore.open_program_cache(f"ro:{tmp_path}/layer")
    with pytest.raises(cucore.Error, match="read-only"):
        alone[b"k" * 32] = filled


def test_mistyped_cache_specs_are_refused_and_schemes_are_case_insensitive(tmp_path, monkeypatch):
    # Each of these once became a local directory (sqlite://NAME: the file /NAME) and a normal miss.
    monkeypatch.chdir(tmp_path)
    for spec in ["redis:/127.0.0.1", "bogus://x", "sqlite3:k.db", "memory:", "sqlite://k.db", "None:"]:
        with pytest.raises(cucore.InvalidArgument, match="cache spec"):
            cucore.open_program_cache(spec)
        with pytest.raises(ValueError):
            cucore.open_program_cache(spec)
    assert list(tmp_path.iterdir()) == []
    with cucore.open_program_cache("REDIS://127.0.0.1:1/0") as cache:  # nothing listens: a miss
        assert isinstance(cache, cucore.RedisProgramCache)
    assert cucore.open_program_cache("NONE") is None
    assert isinstance(cucore.open_program_cache("Memory"), cucore.InMemoryProgramCache)
    assert isinstance(cucore.open_program_cache("./a:b"), cucore.FileStreamProgramCache)
    assert (tmp_path / "a:b").is_dir()
    monkeypatch.setenv("CUCORE_REMOTE_CACHE", "bogus://x")
    with pytest.raises(ValueError, match="CUCORE_REMOTE_CACHE"):
        cucore.open_program_cache("")


def test_compile_error_carries_the_log(options):
    program = cucore.Program("__global__ void broken( { }", "c++", options)
    with pytest.raises(cucore.CompileError) as info:
        program.compile("cubin")
    assert isinstance(info.value, cucore.Error)
    assert "error" in info.value.log and info.value.log in str(info.value)
    assert info.value.backend == "NVRTC"


def test_compile_error_is_not_cached(native_cache, options):
    with pytest.raises(cucore.CompileError):
        cucore.Program("__global__ void broken( { }", "c++", options).compile("cubin", cache=native_cache)
    assert len(native_cache) == 0


def test_invalid_arguments_are_value_errors(options):
    with pytest.raises(ValueError, match="fatbin"):
        cucore.Program(KERNEL, "c++", options).compile("fatbin")
    with pytest.raises(ValueError, match="fortran"):
        cucore.Program(KERNEL, "fortran", options)
    with pytest.raises(cucore.InvalidArgument):
        cucore.Program(KERNEL, "c++", options).compile("cubin-ish")
    with pytest.raises(ValueError, match="positive"):
        cucore.InMemoryProgramCache(max_entries=0)


def test_type_errors(options):
    with pytest.raises(TypeError, match="code must be str"):
        cucore.Program(b"bytes", "c++", options)
    with pytest.raises(TypeError, match="name_expressions elements must be str or bytes"):
        cucore.Program(KERNEL, "c++", options).compile("cubin", [1.5])
    with pytest.raises(TypeError, match="debug"):
        cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH, debug="yes"))
    with pytest.raises(TypeError, match="cache must be a cucore cache"):
        cucore.Program(KERNEL, "c++", options).compile("cubin", cache={})


def test_include_path_through_the_cache_tracks_the_header(tmp_path, native_cache):
    # cuda.core refuses include_path with a cache; cucore's key tracks the headers.
    (tmp_path / "inc").mkdir()
    header = tmp_path / "inc" / "value.cuh"
    header.write_text("#define VALUE 1\n")
    src = '#include "value.cuh"\nextern "C" __global__ void k(int* x) { *x = VALUE; }\n'
    opts = cucore.ProgramOptions(arch=ARCH, include_path=[tmp_path / "inc"])
    first = cucore.Program(src, "c++", opts).compile("ptx", cache=native_cache)
    header.write_text("#define VALUE 2\n")
    program = cucore.Program(src, "c++", opts)
    second = program.compile("ptx", cache=native_cache)
    assert program.last_cache_outcome == "miss"
    assert first.code != second.code
    assert second.code == cucore.Program(src, "c++", opts).compile("ptx").code
    report = program.last_cache_includes
    assert report["tracked"] and report["files"] >= 1 and report["vouched"] == []


def test_no_include_report_without_a_cache_or_headers(native_cache, options):
    program = cucore.Program(KERNEL, "c++", options)
    program.compile("ptx")
    assert program.last_cache_includes is None and program.last_cache_key is None
    program.compile("ptx", cache=native_cache)
    assert program.last_cache_includes["tracked"] is False


def test_in_memory_headers(options):
    src = '#include "config.cuh"\nextern "C" __global__ void k(int* x) { *x = N; }\n'
    opts = cucore.ProgramOptions(arch=ARCH, headers={"config.cuh": "#define N 7\n"})
    ptx = cucore.Program(src, "c++", opts).compile("ptx").code
    assert b"7" in ptx


SWITCH = (Path(__file__).resolve().parents[1] / "data" / "dense_switch.cu").read_text()


def test_device_as_default_execution_space():
    src = 'int twice(int x) { return 2 * x; }\nextern "C" __global__ void k(int* p) { *p = twice(*p); }\n'
    with pytest.raises(cucore.CompileError, match="default-device"):
        cucore.Program(src, "c++", cucore.ProgramOptions(arch=ARCH)).compile("ptx")
    opts = cucore.ProgramOptions(arch=ARCH, device_as_default_execution_space=True)
    assert b".entry k" in cucore.Program(src, "c++", opts).compile("ptx").code


def test_extra_nvrtc_options_reach_nvrtc_and_the_key(native_cache):
    """Passed verbatim after the other flags: -jtd=0 gives every switch a jump table (brx.idx)."""
    plain = cucore.ProgramOptions(arch=ARCH)
    jump = cucore.ProgramOptions(arch=ARCH, extra_nvrtc_options=["-jtd=0"])
    assert b"brx.idx" not in cucore.Program(SWITCH, "c++", plain).compile("ptx").code
    program = cucore.Program(SWITCH, "c++", jump)
    assert b"brx.idx" in program.compile("ptx", cache=native_cache).code
    assert program.last_cache_outcome == "miss"
    assert b"brx.idx" in program.compile("ptx", cache=native_cache).code
    assert program.last_cache_outcome == "hit"
    # A single str is one option, as for the other list fields.
    assert key(code=SWITCH, options=cucore.ProgramOptions(arch=ARCH, extra_nvrtc_options="-jtd=0")) \
        == key(code=SWITCH, options=jump) != key(code=SWITCH, options=plain)
    fields = cucore.explain_program_cache_key(code=SWITCH, code_type="c++", options=jump, target_type="ptx")
    assert [p for label, p in fields if label == "option"][-1] == "-jtd=0"


def test_extra_nvrtc_options_a_field_covers_are_refused_naming_it():
    for raw, field in [("-std=c++20", "std"), ("-I/tmp", "include_path"), ("-default-device",
                       "device_as_default_execution_space"), ("--pch-dir=/tmp", "pch_dir")]:
        with pytest.raises(cucore.InvalidArgument, match=f"program_options::{field}: set {field} instead"):
            cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH, extra_nvrtc_options=[raw])).compile("ptx")
    # -Xcudafe compiles, but no key covers it, even with an extra digest.
    cudafe = cucore.ProgramOptions(arch=ARCH, extra_nvrtc_options=["-Xcudafe", "--display_error_number"])
    assert cucore.Program(KERNEL, "c++", cudafe).compile("ptx").code
    with pytest.raises(ValueError, match="tool inside NVRTC"):
        key(options=cudafe, extra_digest=b"d")


# --- the key ------------------------------------------------------------------------------------


def key(**kw):
    args = dict(code="a", code_type="c++", options=cucore.ProgramOptions(arch=ARCH), target_type="cubin")
    args.update(kw)
    return cucore.make_program_cache_key(**args)


def test_key_is_32_bytes_and_deterministic():
    assert isinstance(key(), bytes) and len(key()) == 32
    assert key() == key()


@pytest.mark.parametrize("change", [
    dict(code="b"), dict(target_type="ptx"), dict(options=cucore.ProgramOptions(arch="sm_90")),
    dict(options=cucore.ProgramOptions(arch=ARCH, debug=True)),
    dict(options=cucore.ProgramOptions(arch=ARCH, name="other")), dict(extra_digest=b"x"),
])
def test_key_differs_on(change):
    assert key(**change) != key()


def test_key_name_expressions_order_insensitive_and_type_checked():
    assert key(name_expressions=["a", "b"]) == key(name_expressions=("b", "a"))
    assert key(name_expressions=["a"]) != key()
    for bad in (123, 1.5, None, bytearray(b"a")):
        with pytest.raises(TypeError):
            key(name_expressions=[bad])


def test_key_case_insensitive_types_and_code_rules():
    assert key(code_type="C++", target_type="CUBIN") == key()
    with pytest.raises(TypeError, match="code must be str"):
        key(code=b"a")
    with pytest.raises(ValueError):
        key(target_type="fatbin")
    with pytest.raises(ValueError):
        key(code_type="ptx", target_type="ltoir")


@pytest.mark.parametrize("option", ["create_pch", "time", "fdevice_time_trace"])
def test_key_refuses_side_effect_options(option):
    with pytest.raises(ValueError, match=option):
        key(options=cucore.ProgramOptions(arch=ARCH, **{option: "out.file"}), extra_digest=b"d")


def test_key_needs_extra_digest_for_pch():
    with pytest.raises(cucore.ExtraDigestRequired) as info:
        key(options=cucore.ProgramOptions(arch=ARCH, use_pch="x.pch"))
    assert isinstance(info.value, ValueError)
    assert len(key(options=cucore.ProgramOptions(arch=ARCH, use_pch="x.pch"), extra_digest=b"d")) == 32


def test_auto_pch_changes_neither_the_key_nor_the_output():
    """Automatic precompiled headers (on unless auto_pch=False) are no NVRTC flag of the key."""
    code = "#include <cuda/std/cstdint>\n" + KERNEL
    keys = {key(code=code, options=cucore.ProgramOptions(arch=ARCH, auto_pch=v))
            for v in (None, True, False)}
    assert len(keys) == 1
    off = cucore.Program(code, "c++", cucore.ProgramOptions(arch=ARCH, auto_pch=False))
    plain = off.compile("cubin", ["scale<float>"])
    for _ in range(3):  # the first compile, the one that precompiles, one from the image
        again = cucore.Program(code, "c++", cucore.ProgramOptions(arch=ARCH)).compile(
            "cubin", ["scale<float>"])
        assert again.code == plain.code


@pytest.fixture
def no_compile_server(tmp_path, monkeypatch):
    """No compile server: an empty server directory of the test's own, no CUCORE_COMPILE_SERVER."""
    monkeypatch.setenv("CUCORE_SERVER_DIR", str(tmp_path / "server"))
    monkeypatch.delenv("CUCORE_COMPILE_SERVER", raising=False)


@pytest.mark.parametrize("mode", ["off", "auto", "OFF", "Auto"])
def test_compile_server_without_a_server_compiles_here(no_compile_server, mode):
    """compile_server "off" compiles here; "auto" finds no server and compiles here: same bytes."""
    plain = compile_uncached(cucore.ProgramOptions(arch=ARCH), names=["scale<float>"])
    served = compile_uncached(cucore.ProgramOptions(arch=ARCH, compile_server=mode),
                              names=["scale<float>"])
    assert served.code == plain.code
    assert served.symbol_mapping == plain.symbol_mapping


@pytest.mark.parametrize("bad", ["", "yes", "automatic", "of f", "on\0"])
def test_compile_server_refuses_other_words_naming_the_field(bad):
    with pytest.raises(ValueError, match=r'compile_server must be "off", "on" or "auto"') as info:
        cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH, compile_server=bad))
    assert isinstance(info.value, cucore.InvalidArgument)
    with pytest.raises(ValueError, match="compile_server"):
        key(options=cucore.ProgramOptions(arch=ARCH, compile_server=bad))
    with pytest.raises(TypeError, match="compile_server must be str or None"):
        key(options=cucore.ProgramOptions(arch=ARCH, compile_server=True))


def test_compile_server_is_not_part_of_the_key(native_cache, no_compile_server):
    keys = {key(options=cucore.ProgramOptions(arch=ARCH, compile_server=mode))
            for mode in (None, "off", "on", "auto", "AUTO")}
    assert len(keys) == 1
    first = cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH, compile_server="off"))
    miss = first.compile("cubin", cache=native_cache)
    assert first.last_cache_outcome == "miss"
    second = cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH, compile_server="auto"))
    hit = second.compile("cubin", cache=native_cache)
    assert second.last_cache_outcome == "hit"
    assert second.last_cache_key == first.last_cache_key
    assert hit.code == miss.code


def test_compile_server_field_routes_a_miss_to_a_running_server(tmp_path, monkeypatch):
    """With a server running, "auto" compiles there (its request count says so) and "off" here,
    also over CUCORE_COMPILE_SERVER=auto; the bytes are the in-process compile's."""
    import json
    import subprocess
    import sys

    directory = tmp_path / "server"
    monkeypatch.setenv("CUCORE_SERVER_DIR", str(directory))
    monkeypatch.setenv("CUCORE_COMPILE_SERVER", "auto")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "cucore", "server", *args, "--dir",
                               str(directory)], capture_output=True, text=True, timeout=60)

    def requests():
        proc = cli("status", "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["requests"]

    started = cli("start", "--workers", "1", "--idle-time", "60")
    assert started.returncode == 0, started.stderr
    try:
        plain = compile_uncached(cucore.ProgramOptions(arch=ARCH, compile_server="off"),
                                 names=["scale<float>"])
        assert requests() == 0
        served = compile_uncached(cucore.ProgramOptions(arch=ARCH, compile_server="AUTO"),
                                  names=["scale<float>"])
        assert requests() == 1
        assert served.code == plain.code
        assert served.symbol_mapping == plain.symbol_mapping
    finally:
        cli("stop")


def test_explain_lists_the_fields():
    fields = cucore.explain_program_cache_key(code="a", code_type="c++",
                                              options=cucore.ProgramOptions(arch=ARCH),
                                              target_type="cubin")
    labels = [label for label, _ in fields]
    assert labels[0] == "schema" and "code" in labels and "target_type" in labels


def test_key_accepts_cuda_core_program_options():
    import cuda.core as cuda_core

    theirs = cuda_core.ProgramOptions(arch=ARCH, std="c++17", define_macro=[("N", "4"), "FAST"],
                                      diag_suppress=177, ptxas_options="-v")
    ours = cucore.ProgramOptions(arch=ARCH, std="c++17", define_macro=[("N", "4"), "FAST"],
                                 diag_suppress=177, ptxas_options="-v")
    assert key(options=theirs) == key(options=ours)
    # ... and cucore compiles with them.
    program = cucore.Program(KERNEL, "c++", theirs)
    assert program.compile("ptx").code == cucore.Program(KERNEL, "c++", ours).compile("ptx").code


def test_use_bundled_headers_is_keyed_or_refused_by_the_nvrtc():
    # cuda.core's field is cucore's too: NVRTC 13.3+ (the wheels' 13.5) bundles headers, and the
    # key covers the directory they are installed in; NVRTC 13.0 (the toolkit's) has none.
    bundled = type("O", (), {"arch": ARCH, "use_bundled_headers": True})()
    try:
        with_bundled = key(options=bundled)
    except ValueError as e:
        assert re.search("use_bundled_headers: NVRTC .* has no bundled headers", str(e)), str(e)
        return
    assert with_bundled != key(options=type("O", (), {"arch": ARCH})())


def test_a_cache_others_can_write_is_refused_unless_shared(tmp_path, options):
    # Anyone who can write a cache can make its readers run their code: a group-writable cache
    # is refused (ValueError, saying why and how) until the caller opts in with shared=True.
    group_dir = tmp_path / "group"
    group_dir.mkdir()
    group_dir.chmod(0o775)
    with pytest.raises(ValueError, match="group-writable"):
        cucore.FileStreamProgramCache(group_dir)
    with pytest.raises(ValueError, match="group-writable"):
        cucore.SQLiteProgramCache(group_dir / "c.db")
    oracle = compile_uncached(options)
    for make in (lambda: cucore.FileStreamProgramCache(group_dir, shared=True),
                 lambda: cucore.SQLiteProgramCache(group_dir / "c.db", shared=True)):
        stored_then_hit(make, options, oracle)


def test_verify_checks_a_hit_and_is_not_part_of_the_key(native_cache):
    """ProgramOptions.verify: a sampled hit is compiled again and compared (docs/verify.md)."""
    keys = {key(options=cucore.ProgramOptions(arch=ARCH, verify=rate)) for rate in (None, 0, 0.5, 1)}
    assert len(keys) == 1
    first = cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH))
    miss = first.compile("cubin", cache=native_cache)
    assert first.last_verify == "not_verified"
    second = cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH, verify=1.0))
    hit = second.compile("cubin", cache=native_cache)
    assert second.last_cache_outcome == "hit"
    assert second.last_verify == "verified"
    assert hit.code == miss.code


def test_verify_in_the_background_returns_the_hit_and_checks_it_later(native_cache):
    """Below rate 1 (or verify_in_background=True) a sampled hit is queued for the process's verify
    thread; cucore.wait_for_verification() waits for its finding (docs/verify.md)."""
    first = cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH))
    miss = first.compile("cubin", cache=native_cache)
    for options in (cucore.ProgramOptions(arch=ARCH, verify=0.9999999),
                    cucore.ProgramOptions(arch=ARCH, verify=1, verify_in_background=True)):
        checked = cucore.Program(KERNEL, "c++", options)
        hit = checked.compile("cubin", cache=native_cache)
        assert checked.last_cache_outcome == "hit"
        assert checked.last_verify == "queued"
        assert hit.code == miss.code
    cucore.wait_for_verification()
    stats = native_cache.persistent_stats
    if stats is not None:
        assert stats["verify"] == {"verified": 2, "mismatches": 0}
    synchronous = cucore.Program(KERNEL, "c++",
                                 cucore.ProgramOptions(arch=ARCH, verify=0.9999999, verify_in_background=False))
    synchronous.compile("cubin", cache=native_cache)
    assert synchronous.last_verify == "verified"


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan")])
def test_verify_refuses_a_rate_outside_0_to_1(bad):
    with pytest.raises(ValueError, match="verify must be from 0 to 1"):
        cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH, verify=bad))
    with pytest.raises(TypeError, match="verify must be a number"):
        cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH, verify="1"))
