"""PTX and NVVM IR programs through the bindings (the c++ path is in test_program.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import cucore
from conftest import ARCH, KERNEL

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def ptx():
    return cucore.Program(KERNEL, "c++", cucore.ProgramOptions(arch=ARCH)).compile("ptx").code.decode()


def test_ptx_to_cubin_through_a_cache_equals_uncached(native_cache, ptx):
    opts = cucore.ProgramOptions(arch=ARCH)
    oracle = cucore.Program(ptx, "ptx", opts).compile("cubin").code
    program = cucore.Program(ptx, "ptx", opts)
    assert program.backend in ("nvJitLink", "driver")
    assert program.compile("cubin", cache=native_cache).code == oracle
    assert program.compile("cubin", cache=native_cache).code == oracle
    assert program.last_cache_outcome == "hit"


def test_ptx_code_must_be_str(ptx):
    with pytest.raises(TypeError, match="code must be str"):
        cucore.Program(ptx.encode(), "ptx", cucore.ProgramOptions(arch=ARCH))


@pytest.mark.parametrize("as_bytes", [False, True])
def test_nvvm_ir_text_or_bytes(native_cache, as_bytes):
    text = (DATA / "scale.ll").read_text()
    code = text.encode() if as_bytes else text
    opts = cucore.ProgramOptions(arch=ARCH)
    program = cucore.Program(code, "nvvm", opts)
    assert program.backend == "NVVM"
    oracle = cucore.Program(text, "nvvm", opts).compile("ptx").code
    assert b".entry scale" in oracle
    assert program.compile("ptx", cache=native_cache).code == oracle
    assert program.compile("ptx", cache=native_cache).code == oracle
    assert program.last_cache_outcome == "hit"
    # str and bytes of the same IR are one key (cuda.core's rule)
    key = dict(code_type="nvvm", options=opts, target_type="ptx")
    assert cucore.make_program_cache_key(code=text, **key) == cucore.make_program_cache_key(
        code=text.encode(), **key)


def test_nvvm_refuses_what_it_cannot_compile_to():
    with pytest.raises(ValueError, match="cubin"):
        cucore.Program((DATA / "scale.ll").read_text(), "nvvm",
                       cucore.ProgramOptions(arch=ARCH)).compile("cubin")


def test_nvvm_extra_sources_and_libdevice_gate():
    opts = cucore.ProgramOptions(arch=ARCH, extra_sources=[("helper", (DATA / "helper_module.ll").read_bytes())])
    main = (DATA / "uses_helper.ll").read_text()
    assert b".entry" in cucore.Program(main, "nvvm", opts).compile("ptx").code
    with pytest.raises(ValueError, match="extra_sources"):
        cucore.make_program_cache_key(code="x", code_type="c++", options=opts, target_type="ptx")
    with pytest.raises(cucore.ExtraDigestRequired):
        cucore.make_program_cache_key(code=main, code_type="nvvm", target_type="ptx",
                                      options=cucore.ProgramOptions(arch=ARCH, use_libdevice=True))
