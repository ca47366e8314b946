"""cucore.ProgramOptions: the fields of cuda.core's ProgramOptions plus cucore's own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence, Tuple, Union

_StrList = Union[str, Sequence[str], None]
_IntList = Union[int, Sequence[int], None]
_Macro = Union[str, Tuple[str, str]]


@dataclass
class ProgramOptions:
    """Options of a :class:`cucore.Program`, with cuda.core's field names and value forms.

    Every field left ``None`` emits no flag. cucore reads options by attribute name, so
    ``cuda.core.ProgramOptions`` is accepted wherever this class is. cucore-only fields:
    ``headers`` (in-memory headers, ``{name: contents}``), ``toolkit_include_path`` (search the
    toolkit's include directories, default on), ``device_int128``, ``device_float128``,
    ``extra_nvrtc_options`` (NVRTC options no field covers, passed verbatim after the rest and
    hashed into the cache key; an option a field covers is refused, naming the field) and
    ``auto_pch`` (automatic precompiled headers, default on; ``False`` turns them off: outputs
    are the same either way, and the cache key does not change) and ``compile_server`` (where a
    C++ miss compiles: ``"off"`` in this process, ``"on"`` in the user's compile server, started
    when none runs, ``"auto"`` in one that runs, never starting one; case-insensitive; default
    ``None``: ``CUCORE_COMPILE_SERVER``, else off. Any trouble with the server compiles in this
    process; outputs are the same either way, and it is never part of the cache key; another
    value is a ``ValueError``) and ``verify`` (the fraction of cache hits, 0 to 1, compiled again
    uncached and compared with the entry: a mismatch removes the entry and returns the fresh
    result, ``Program.last_verify`` says which; default ``None``: ``CUCORE_VERIFY``, else 0;
    never part of the cache key) and ``verify_in_background`` (where a sampled hit is checked:
    ``True`` on the process's background thread, the hit returned at once and
    ``Program.last_verify`` ``"queued"``; ``False`` on the calling thread; default ``None``: in
    the background below rate 1, on the calling thread at 1; ``cucore.wait_for_verification()``
    waits for the background checks).
    """

    name: str | None = "default_program"
    arch: str | None = None
    relocatable_device_code: bool | None = None
    extensible_whole_program: bool | None = None
    debug: bool | None = None
    lineinfo: bool | None = None
    device_code_optimize: bool | None = None
    ptxas_options: _StrList = None
    max_register_count: int | None = None
    ftz: bool | None = None
    prec_sqrt: bool | None = None
    prec_div: bool | None = None
    fma: bool | None = None
    use_fast_math: bool | None = None
    extra_device_vectorization: bool | None = None
    link_time_optimization: bool | None = None
    gen_opt_lto: bool | None = None
    define_macro: _Macro | Sequence[_Macro] | None = None
    undefine_macro: _StrList = None
    include_path: _StrList = None
    pre_include: _StrList = None
    no_source_include: bool | None = None
    toolkit_include_path: bool | None = None
    use_bundled_headers: bool | None = None
    headers: Mapping[str, str] | Sequence[Tuple[str, str]] | None = None
    std: str | None = None
    builtin_move_forward: bool | None = None
    builtin_initializer_list: bool | None = None
    disable_warnings: bool | None = None
    restrict: bool | None = None
    device_as_default_execution_space: bool | None = None
    device_int128: bool | None = None
    device_float128: bool | None = None
    optimization_info: str | None = None
    no_display_error_number: bool | None = None
    diag_error: _IntList = None
    diag_suppress: _IntList = None
    diag_warn: _IntList = None
    brief_diagnostics: bool | None = None
    time: str | None = None
    split_compile: int | None = None
    fdevice_syntax_only: bool | None = None
    minimal: bool | None = None
    no_cache: bool | None = None
    fdevice_time_trace: str | None = None
    frandom_seed: str | None = None
    ofast_compile: str | None = None
    pch: bool | None = None
    create_pch: str | None = None
    use_pch: str | None = None
    pch_dir: str | None = None
    pch_verbose: bool | None = None
    pch_messages: bool | None = None
    instantiate_templates_in_pch: bool | None = None
    auto_pch: bool | None = None
    extra_sources: Sequence[Tuple[str, Union[str, bytes]]] | None = field(default=None)
    use_libdevice: bool | None = None
    numba_debug: bool | None = None
    # NVRTC 13.1+ (docs/compilation.md, "Tile code").
    warning_as_error: _StrList = None
    wreorder: bool | None = None
    enable_tile: bool | None = None
    tile_only: bool | None = None
    simt_only: bool | None = None
    default_tile: bool | None = None
    diagnose_implicit_tile_var: bool | None = None
    extra_nvrtc_options: _StrList = None
    compile_server: str | None = None
    verify: float | None = None
    verify_in_background: bool | None = None
