#!/usr/bin/env python3
"""Generates the exported API of `cucore run`'s drop-in libraries (src/dropin/generated/) from the
headers of every NVRTC, nvJitLink and libNVVM release they stand in for (docs/transparent-cache.md,
"The exported API").

    scripts/gen-dropin-api.py --fetch            # pip-downloads the wheels of every minor (dev time)
    scripts/gen-dropin-api.py --headers DIR      # DIR/VERSION/{nvrtc.h,nvJitLink.h,nvvm.h}

For each soname the drop-in exports the union over the minors of that major: every function any
minor's header declares (nvJitLink: each under every minor's versioned name __nvJitLinkF_M_m, as
the real libraries export them, plus the plain name), plus the undocumented exports observed with
`objdump -T` (EXTRAS below). Writes per soname a linker version script (*.map, with the real
version node) and a shim table (*.inc: one CUCORE_SHIM line per export), and exports.txt (every
name per soname, which `cucore run` compiles in to check a real library before using a drop-in).
Commit the output, not the wheels.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import zipfile

MINORS = {12: [0, 1, 2, 3, 4, 5, 6, 8, 9], 13: [0, 1, 2, 3, 4, 5]}  # there was no CUDA 12.7
WHEELS = {  # (version, what) -> pip requirement; libNVVM 12.x ships in nvidia-cuda-nvcc-cu12
    "nvrtc12": "nvidia-cuda-nvrtc-cu12=={v}.*",
    "nvjitlink12": "nvidia-nvjitlink-cu12=={v}.*",
    "nvvm12": "nvidia-cuda-nvcc-cu12=={v}.*",
    "nvrtc13": "nvidia-cuda-nvrtc=={v}.*",
    "nvjitlink13": "nvidia-nvjitlink=={v}.*",
    "nvvm13": "nvidia-nvvm=={v}.*",
}
HEADER = {"nvrtc": "nvrtc.h", "nvjitlink": "nvJitLink.h", "nvvm": "nvvm.h"}

# Exports no header declares (objdump -T of the real libraries), with the signatures the shims
# forward them by. Unknown signatures forward six integer registers (x86-64 and AArch64 pass
# pointers and integers there; no observed caller passes more).
GENERIC = ("void*", "NULL", "(uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, "
           "uintptr_t f)", "(a, b, c, d, e, f)")
EXTRAS = {
    "nvrtc": [("nvrtcResult", "FAIL", "__nvrtcCPEx",
               "(void* prog, void* src, void* name, int num_headers, void* headers, "
               "void* include_names, uintptr_t a, uintptr_t b, uintptr_t c)",
               "(prog, src, name, num_headers, headers, include_names, a, b, c)", None)],
    "nvrtc13": [(*GENERIC[:2], "__nvrtcNvvmHandle", *GENERIC[2:], (13, 5))],
    "nvjitlink": [("void*", "NULL", "__nvJitLinkAPI", "(int magic)", "(magic)", None)],
    "nvvm": [("nvvmResult", "FAIL", "nvvmDisableConcurrentAPI", "(void)", "()", None),
             ("void*", "NULL", "__nvvmHandle", "(int id)", "(id)", None),
             ("void*", "NULL", "__nvvmHandleTarget", "(int id, bool flag)", "(id, flag)", None)],
}
SCALARS = {"int": "int", "unsigned int": "unsigned int", "unsigned": "unsigned int",
           "size_t": "size_t", "uint32_t": "uint32_t", "nvrtcResult": "int",
           "nvJitLinkResult": "int", "nvvmResult": "int", "nvJitLinkInputType": "int",
           "bool": "bool"}
HANDLES = {"nvrtcProgram", "nvJitLinkHandle", "nvvmProgram"}
RESULT = {"nvrtc": "nvrtcResult", "nvjitlink": "nvJitLinkResult", "nvvm": "nvvmResult"}
PREFIX = {"nvrtc": r"nvrtc\w+", "nvjitlink": r"(?:__)?nvJitLink\w+", "nvvm": r"nvvm\w+"}


def fetch(out):
    """Downloads every minor's wheels (pip) and keeps only the three headers: out/KIND/VERSION/."""
    for kind, req in WHEELS.items():
        major = int(kind[-2:])
        for minor in [9] if kind == "nvvm12" else MINORS[major]:
            v = f"{major}.{minor}"
            dest = os.path.join(out, kind[:-2], v)
            if os.path.exists(os.path.join(dest, HEADER[kind[:-2]])):
                continue
            with tempfile.TemporaryDirectory() as tmp:
                r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                    "--only-binary=:all:", "--platform", "manylinux2014_x86_64",
                                    "--python-version", "3.12", "-d", tmp, req.format(v=v)])
                if r.returncode != 0:
                    sys.exit(f"gen-dropin-api: pip could not download {req.format(v=v)}")
                for whl in glob.glob(os.path.join(tmp, "*.whl")):
                    with zipfile.ZipFile(whl) as z:
                        for n in z.namelist():
                            if os.path.basename(n) == HEADER[kind[:-2]]:
                                os.makedirs(dest, exist_ok=True)
                                with open(os.path.join(dest, os.path.basename(n)), "wb") as f:
                                    f.write(z.read(n))


def split_params(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def normalize(param, where):
    """A parameter as the shim declares it: pointers (and handles) as void*, scalars as C types."""
    if param == "void":
        return None
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)", param)  # a function pointer
    if m:
        return "void*", m.group(1)
    m = re.match(r"(.*?)(\w+)\s*(\[\s*\])?$", param)
    if not m:
        sys.exit(f"gen-dropin-api: cannot read parameter '{param}' of {where}")
    ty, name = m.group(1).strip(), m.group(2)
    if "*" in ty or m.group(3) or ty.replace("const", "").strip() in HANDLES:
        return "void*", name
    ty = ty.replace("const", "").strip()
    if ty not in SCALARS:
        sys.exit(f"gen-dropin-api: unknown parameter type '{ty}' in {where}: add it to SCALARS")
    return SCALARS[ty], name


def parse(path, lib):
    """{name: (ret, params, args)} of the functions `path` declares (declarations, not bodies)."""
    text = open(path, encoding="utf-8", errors="replace").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
    out = {}
    pattern = (r"(?:^|(?<=[;}{]))\s*(?:extern\s+(?:\"C\"\s+)?)?(const\s+char\s*\*|" + RESULT[lib] +
               r")\s*(" + PREFIX[lib] + r")\s*\(([^;{]*?)\)\s*;")
    for m in re.finditer(pattern, text, flags=re.M):
        ret, name, params = m.group(1), m.group(2), " ".join(m.group(3).split())
        decl = [normalize(p, f"{name} in {path}") for p in split_params(params)]
        decl = [d for d in decl if d]
        ret = "const char*" if "char" in ret else RESULT[lib]
        out[name] = (ret, "(" + ", ".join(f"{t} {n}" for t, n in decl) + ")" if decl else "(void)",
                     "(" + ", ".join(n for _, n in decl) + ")")
    if not out:
        sys.exit(f"gen-dropin-api: no declarations found in {path}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--headers", help="DIR/{nvrtc,nvjitlink,nvvm}/VERSION/HEADER (from --fetch)")
    ap.add_argument("--fetch", action="store_true", help="download the headers into --headers")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "src",
                                                  "dropin", "generated"))
    a = ap.parse_args()
    headers = a.headers or os.path.join(tempfile.gettempdir(), "cucore-dropin-headers")
    if a.fetch:
        fetch(headers)
    os.makedirs(a.out, exist_ok=True)
    exports = []
    note = ("/* Generated by scripts/gen-dropin-api.py from the headers of {what}; do not edit. */\n")
    for lib, majors in (("nvrtc", (12, 13)), ("nvjitlink", (12, 13)), ("nvvm", (None,))):
        for major in majors:
            versions = ([f"{major}.{m}" for m in MINORS[major]] if major else
                        ["12.9"] + [f"13.{m}" for m in MINORS[13]])
            funcs = {}  # name -> (ret, params, args, first version)
            for v in versions:
                path = os.path.join(headers, lib, v, HEADER[lib])
                if not os.path.exists(path):
                    sys.exit(f"gen-dropin-api: no {path}: run with --fetch")
                for name, decl in parse(path, lib).items():
                    funcs.setdefault(name, (*decl, v))
            soname = {"nvrtc": f"libnvrtc.so.{major}", "nvjitlink": f"libnvJitLink.so.{major}",
                      "nvvm": "libnvvm.so.4"}[lib]
            tag = f"{lib}{major or ''}"
            fail = "FAIL"
            lines = []  # CUCORE_SHIM(ret, fail, name, engine_name, params, args)
            if lib == "nvjitlink":
                # The header maps each function to __nvJitLinkF_M_m; the real library exports
                # every function under every minor of its major, and the plain name.
                plain = {}
                for name, (ret, params, args, _) in funcs.items():
                    m = re.match(r"__nvJitLink(\w+)_\d+_\d+$", name)
                    if m:
                        plain.setdefault(m.group(1), (ret, params, args))
                for name, (ret, params, args, _) in funcs.items():
                    if name.startswith("nvJitLink") and name[len("nvJitLink"):] not in plain:
                        lines.append((ret, fail, name, name, params, args))
                for f, (ret, params, args) in sorted(plain.items()):
                    engine = f"__nvJitLink{f}_13_0"
                    for minor in MINORS[major]:
                        lines.append((ret, fail, f"__nvJitLink{f}_{major}_{minor}", engine, params,
                                      args))
                    lines.append((ret, fail, f"nvJitLink{f}", engine, params, args))
                if major == 12:  # 12.7 was never released, but 12.8+ libraries export _12_7
                    for f, (ret, params, args) in sorted(plain.items()):
                        lines.append((ret, fail, f"__nvJitLink{f}_12_7", f"__nvJitLink{f}_13_0",
                                      params, args))
            else:
                for name, (ret, params, args, _) in sorted(funcs.items()):
                    f = '"' + {"nvrtc": "NVRTC", "nvvm": "NVVM"}[lib] + '_ERROR_INTERNAL_ERROR"'
                    lines.append((ret, f if ret == "const char*" else fail, name, name, params,
                                  args))
            for ret, f, name, params, args, since in EXTRAS.get(lib, []) + (EXTRAS.get(tag, []) if tag != lib else []):
                lines.append((ret, f, name, name, params, args))
            lines.sort(key=lambda x: x[2])
            what = f"{soname} {versions[0]}–{versions[-1]}"
            with open(os.path.join(a.out, tag + ".inc"), "w") as out:
                out.write(note.format(what=what) + "/* clang-format off */\n")
                for ret, f, name, engine, params, args in lines:
                    out.write(f"CUCORE_SHIM({ret}, {f}, {name}, {engine}, {params}, {args})\n")
            with open(os.path.join(a.out, tag + ".map"), "w") as out:
                out.write(note.format(what=what))
                node = "" if lib == "nvvm" else soname + " "  # libNVVM's symbols are unversioned
                out.write(node + "{\n  global:\n")
                for line in lines:
                    out.write(f"    {line[2]};\n")
                out.write("  local:\n    *;\n};\n")
            exports.append((soname, [line[2] for line in lines]))
            print(f"{soname}: {len(lines)} exports ({what})")
    with open(os.path.join(a.out, "exports.inc"), "w") as out:
        out.write(note.format(what="every release") +
                  "// {soname, names}: what each drop-in exports (cucore run checks real libraries"
                  " against it).\n// clang-format off\n")
        for soname, names in exports:
            out.write(f'{{"{soname}", {{\n')
            for n in names:
                out.write(f'  "{n}",\n')
            out.write("}},\n")


if __name__ == "__main__":
    main()
