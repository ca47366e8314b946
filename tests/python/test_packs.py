"""Cache packs from Python: cucore.export_pack / import_pack / verify_pack (docs/cache-packs.md)."""

from __future__ import annotations

import datetime

import pytest

import cucore
from conftest import ARCH, KERNEL


def _compile(cache, options, names=("scale<float>",)):
    program = cucore.Program(KERNEL, "c++", options)
    code = program.compile("cubin", list(names), cache=cache)
    return program, code


def test_a_pack_moves_real_compiles_into_every_native_cache(tmp_path, native_cache, options):
    with cucore.FileStreamProgramCache(tmp_path / "source", fsync=False) as source:
        _, float_code = _compile(source, options)
        # Another program name: each key keeps its note (a note names a program's latest key).
        other = cucore.ProgramOptions(arch=ARCH, std="c++17", name="other.cu")
        _, int_code = _compile(source, other, ["scale<int>"])
        exported = cucore.export_pack(source, tmp_path / "k.cupack")
    assert exported["entries"] == 2
    assert exported["skipped"] == 0
    assert exported["with_compiler_identity"] == 2
    assert exported["pack_bytes"] == (tmp_path / "k.cupack").stat().st_size

    info = cucore.verify_pack(str(tmp_path / "k.cupack"))
    assert info["entries"] == 2
    assert info["format_version"] == 1

    result = cucore.import_pack(native_cache, tmp_path / "k.cupack")
    assert result == {"entries": 2, "added": 2, "already_present": 0,
                      "bytes_added": len(float_code.code) + len(int_code.code)}
    program, hit = _compile(native_cache, options)
    assert program.last_cache_outcome == "hit"
    assert hit.code == float_code.code
    assert hit.symbol_mapping == float_code.symbol_mapping
    again = cucore.import_pack(native_cache, tmp_path / "k.cupack")
    assert again["added"] == 0 and again["already_present"] == 2


def test_selections(tmp_path, options):
    source = cucore.InMemoryProgramCache()
    program, _ = _compile(source, options)
    source[b"other"] = cucore.ObjectCode(b"\x7fELF" + bytes(60), "cubin", "other.cu")
    pack = tmp_path / "s.cupack"
    assert cucore.export_pack(source, pack, keys=[program.last_cache_key])["entries"] == 1
    assert cucore.export_pack(source, pack, match="other*")["entries"] == 1
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    # The in-memory cache keeps no times: a time selection picks nothing from it.
    assert cucore.export_pack(source, pack, since=future)["entries"] == 0
    with pytest.raises(cucore.InvalidArgument, match="no entry 6e6f7065"):
        cucore.export_pack(source, pack, keys=[b"nope"])


def test_a_damaged_pack_adds_nothing_and_names_the_record(tmp_path, options):
    source = cucore.InMemoryProgramCache()
    _compile(source, options)
    _compile(source, options, ["scale<int>"])
    pack = tmp_path / "d.cupack"
    cucore.export_pack(source, pack)
    data = bytearray(pack.read_bytes())
    second = data.find(b"\x28\xb5\x2f\xfd", 60)
    data[second + 30] ^= 0x08
    pack.write_bytes(bytes(data))
    into = cucore.InMemoryProgramCache()
    with pytest.raises(cucore.InvalidArgument, match=f"record 1 at byte {second}: damaged"):
        cucore.import_pack(into, pack)
    assert len(into) == 0
    with pytest.raises(ValueError, match="not a cucore cache pack"):
        (tmp_path / "x").write_bytes(b"hello")
        cucore.verify_pack(tmp_path / "x")
    with pytest.raises(TypeError, match="cucore ProgramCache"):
        cucore.import_pack({}, pack)
