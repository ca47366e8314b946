#!/usr/bin/env python3
"""Compiles every corpus kernel of tests/data/corpus/corpus.json with NVRTC, uncached, under its
spec, and reports what NVRTC touched on the file system: how the numbers in
tests/data/corpus/README.md were obtained.

For each kernel, in fresh processes (so every compile is cold):
  1. a plain compile, timed around nvrtcCompileProgram (wall clock);
  2. the same compile under `strace -f -e trace=%file`, whose log is parsed for the paths under the
     kernel's include directories (its -I list, toolkit directories included): the distinct files
     NVRTC opened successfully, the distinct paths it probed and found absent (ENOENT from any
     file syscall: openat, stat, access, ...), and every probe of a `NAME.stdh` candidate.
NVRTC is driven through ctypes (libnvrtc.so.13 of the toolkit); nothing here depends on cucore.
It only reads: traces and outputs go to a temporary directory under /tmp (kept with --keep).

Usage: scripts/corpus-check.py [--corpus DEST] [--cuda ROOT] [--only NAME ...] [--no-strace]
                               [--keep] [--json]
  DEST: where scripts/fetch-corpus.sh put the headers (default .cache/corpus)
  ROOT: the CUDA toolkit root (default $CUDA_PATH or /usr/local/cuda)
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(REPO, "tests", "data", "corpus", "corpus.json")


def load_spec():
    with open(SPEC) as f:
        return json.load(f)


def expand(text, places):
    for key, value in places.items():
        text = text.replace("${" + key + "}", value)
    if "${" in text:
        raise SystemExit(f"corpus-check: unknown placeholder in {text!r}")
    return text


def include_dirs(kernel, places):
    """The -I list NVRTC gets, in order: the spec's directories, then the toolkit's (as cucore's
    toolkit_include_path adds them: include/cccl, then include)."""
    dirs = [expand(d, places) for d in kernel["options"].get("include_path", [])]
    if kernel["options"].get("toolkit_include_path", True):
        dirs += [places["CUDA"] + "/include/cccl", places["CUDA"] + "/include"]
    return dirs


def nvrtc_flags(kernel, places):
    """NVRTC flags in the order cucore's compiler_flags emits them, for the fields the corpus uses."""
    o = kernel["options"]
    known = {"include_path", "toolkit_include_path", "std", "device_as_default_execution_space",
             "define_macro", "ftz"}
    unknown = set(o) - known
    if unknown:
        raise SystemExit(f"corpus-check: {kernel['name']}: fields this script does not know: "
                         f"{sorted(unknown)}")
    flags = [f"--gpu-architecture={kernel['arch']}"]
    if "ftz" in o:
        flags.append("--ftz=" + ("true" if o["ftz"] else "false"))
    for m in o.get("define_macro", []):
        flags.append("--define-macro=" + m["name"] + ("=" + m["value"] if "value" in m else ""))
    flags += ["--include-path=" + d for d in include_dirs(kernel, places)]
    if "std" in o:
        flags.append("--std=" + o["std"])
    if o.get("device_as_default_execution_space"):
        flags.append("--device-as-default-execution-space")
    return flags


def compile_one(nvrtc_path, source_path, program_name, flags, name_expressions, target, out_path):
    """Runs in the child process: one NVRTC compile; prints a JSON line."""
    nv = ctypes.CDLL(nvrtc_path)
    with open(source_path, "rb") as f:
        src = f.read()
    prog = ctypes.c_void_p()
    rc = nv.nvrtcCreateProgram(ctypes.byref(prog), src, program_name.encode(), 0, None, None)
    if rc:
        return {"ok": False, "error": f"nvrtcCreateProgram {rc}"}
    for ne in name_expressions:
        nv.nvrtcAddNameExpression(prog, ne.encode())
    arr = (ctypes.c_char_p * len(flags))(*[x.encode() for x in flags])
    t0 = time.perf_counter()
    rc = nv.nvrtcCompileProgram(prog, len(flags), arr)
    seconds = time.perf_counter() - t0
    n = ctypes.c_size_t()
    nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nv.nvrtcGetProgramLog(prog, log)
    result = {"ok": rc == 0, "seconds": seconds, "log": log.value.decode(errors="replace")}
    if rc:
        return result
    size_fn, get_fn = {"cubin": (nv.nvrtcGetCUBINSize, nv.nvrtcGetCUBIN),
                       "ptx": (nv.nvrtcGetPTXSize, nv.nvrtcGetPTX)}[target]
    size_fn(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    get_fn(prog, buf)
    result["bytes"] = n.value
    with open(out_path, "wb") as f:
        f.write(buf.raw)
    mangled = {}
    for ne in name_expressions:
        p = ctypes.c_char_p()
        nv.nvrtcGetLoweredName(prog, ne.encode(), ctypes.byref(p))
        mangled[ne] = p.value.decode() if p.value else None
    result["lowered"] = mangled
    return result


CALL = re.compile(r'^(\d+)\s+(\w+)\((.*)$')
RESUMED = re.compile(r'^(\d+)\s+<\.\.\. (\w+) resumed>(.*)$')
RESULT = re.compile(r'\)\s+=\s+(-?\d+|\?)(?:\s+(\w+))?')
PATH = re.compile(r'"((?:[^"\\]|\\.)*)"')


def parse_trace(path):
    """(syscall, path, return value, errno name) for every file syscall in an strace -f log."""
    pending = {}
    events = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = RESUMED.match(line)
            if m:
                pid, call, rest = m.groups()
                if pid not in pending:
                    continue
                call, head = pending.pop(pid)
                line_rest = head + rest
            else:
                m = CALL.match(line)
                if not m:
                    continue
                pid, call, rest = m.groups()
                if rest.endswith("<unfinished ...>"):
                    pending[pid] = (call, rest[: -len("<unfinished ...>")])
                    continue
                line_rest = rest
            p = PATH.search(line_rest)
            r = RESULT.search(line_rest)
            if not p or not r:
                continue
            value = p.group(1).encode().decode("unicode_escape")
            events.append((call, value, r.group(1), r.group(2)))
    return events


OPENS = {"open", "openat", "openat2", "creat"}
# A probe of a path that does not exist: ENOENT, or ENOTDIR when a component is a file.
ABSENT = {"ENOENT", "ENOTDIR"}


def summarize(events, dirs):
    roots = [os.path.normpath(d) + "/" for d in dirs]

    def under(p):
        q = os.path.normpath(p)
        return any(q.startswith(r) for r in roots)

    opened, absent, stdh = set(), set(), set()
    for call, p, ret, err in events:
        if p.endswith(".stdh"):
            stdh.add((os.path.normpath(p), "absent" if err in ABSENT else
                      "found" if ret != "-1" else err or "?"))
        if not under(p):
            continue
        q = os.path.normpath(p)
        if call in OPENS and ret not in ("-1", "?") and not os.path.isdir(q):
            opened.add(q)
        elif err in ABSENT:
            absent.add(q)
    return opened, absent, sorted(stdh)


def by_directory(paths, dirs):
    """How many of `paths` lie under each include directory (the longest one that holds it)."""
    roots = sorted({os.path.normpath(d) for d in dirs}, key=len, reverse=True)
    counts = {}
    for p in paths:
        for r in roots:
            if p.startswith(r + "/"):
                counts[r] = counts.get(r, 0) + 1
                break
    return counts


def child_command(args, kernel, places, tmp, tag):
    src = os.path.join(REPO, "tests", "data", "corpus", kernel["file"])
    return [sys.executable, os.path.abspath(__file__), "--child", json.dumps({
        "nvrtc": args.nvrtc, "source": src, "name": kernel["program_name"],
        "flags": nvrtc_flags(kernel, places),
        "name_expressions": kernel.get("name_expressions", []),
        "target": kernel["target"], "out": os.path.join(tmp, f"{kernel['name']}.{tag}.bin")})]


def run_child(cmd, cwd):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode or not lines:
        return {"ok": False, "error": f"child exited {out.returncode}: {out.stderr[-2000:]}"}
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=os.path.join(REPO, ".cache", "corpus"))
    ap.add_argument("--cuda", default=os.environ.get("CUDA_PATH", "/usr/local/cuda"))
    ap.add_argument("--nvrtc", default=None, help="libnvrtc.so.13 (default ROOT/lib64/...)")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--no-strace", action="store_true")
    ap.add_argument("--repeat", type=int, default=1,
                    help="plain compiles per kernel, each in a fresh process; the median is shown")
    ap.add_argument("--keep", action="store_true", help="keep the /tmp directory of traces")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        c = json.loads(args.child)
        print(json.dumps(compile_one(c["nvrtc"], c["source"], c["name"], c["flags"],
                                     c["name_expressions"], c["target"], c["out"])))
        return 0

    args.nvrtc = args.nvrtc or os.path.join(args.cuda, "lib64", "libnvrtc.so.13")
    corpus = os.path.abspath(args.corpus)
    if not os.path.isfile(os.path.join(corpus, ".cucore-corpus")):
        raise SystemExit(f"corpus-check: no corpus at {corpus}: run scripts/fetch-corpus.sh")
    places = {"CUTLASS": corpus + "/cutlass/include", "CUPY": corpus + "/cupy",
              "CUDA": os.path.abspath(args.cuda)}
    strace = None if args.no_strace else shutil.which("strace")
    if not args.no_strace and not strace:
        raise SystemExit("corpus-check: strace not found (or pass --no-strace)")

    spec = load_spec()
    tmp = tempfile.mkdtemp(prefix="corpus-check.", dir="/tmp")
    # The compiles run in an empty directory: NVRTC stats a few names in its current directory.
    cwd = os.path.join(tmp, "cwd")
    os.mkdir(cwd)
    rows, failed = [], []
    try:
        for kernel in spec["kernels"]:
            if args.only and kernel["name"] not in args.only:
                continue
            row = {"name": kernel["name"]}
            times = []
            for _ in range(max(1, args.repeat)):
                plain = run_child(child_command(args, kernel, places, tmp, "plain"), cwd)
                if not plain.get("ok"):
                    break
                times.append(plain["seconds"])
            if not plain.get("ok"):
                failed.append(kernel["name"])
                row.update(ok=False, error=plain.get("error"), log=plain.get("log", "")[-4000:])
                rows.append(row)
                continue
            times.sort()
            row.update(ok=True, seconds=round(times[len(times) // 2], 3),
                       all_seconds=[round(t, 3) for t in times], bytes=plain["bytes"],
                       lowered=plain.get("lowered", {}),
                       warnings=plain["log"].count("warning"))
            if strace:
                trace = os.path.join(tmp, f"trace_{kernel['name']}.txt")
                cmd = [strace, "-f", "-qq", "-e", "trace=%file", "-o", trace] + \
                    child_command(args, kernel, places, tmp, "traced")
                traced = run_child(cmd, cwd)
                if not traced.get("ok"):
                    failed.append(kernel["name"])
                    row.update(ok=False, error="traced compile failed: " + str(traced))
                    rows.append(row)
                    continue
                dirs = include_dirs(kernel, places)
                opened, absent, stdh = summarize(parse_trace(trace), dirs)
                row.update(files_read=len(opened), absent_probes=len(absent), stdh=stdh,
                           read_by_directory=by_directory(opened, dirs),
                           absent_by_directory=by_directory(absent, dirs),
                           traced_seconds=round(traced["seconds"], 3))
                if args.keep:
                    row["trace"] = trace
            rows.append(row)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'kernel':28} {'ok':3} {'compile s':>9} {'cubin B':>8} {'read':>5} "
              f"{'absent':>6} {'.stdh':>5}")
        for r in rows:
            if not r["ok"]:
                print(f"{r['name']:28} NO  {r.get('error') or ''}\n{r.get('log', '')}")
                continue
            print(f"{r['name']:28} yes {r['seconds']:9.3f} {r['bytes']:8d} "
                  f"{r.get('files_read', '-'):>5} {r.get('absent_probes', '-'):>6} "
                  f"{len(r.get('stdh', [])):>5}")
        short = {v: "${" + k + "}" for k, v in places.items()}

        def shorten(path):
            for full, name in sorted(short.items(), key=lambda x: -len(x[0])):
                if path.startswith(full):
                    return name + path[len(full):]
            return path
        for r in rows:
            if r.get("read_by_directory"):
                print(f"  {r['name']}: read " + ", ".join(
                    f"{n} in {shorten(d)}" for d, n in r["read_by_directory"].items()) +
                    "; absent " + ", ".join(
                    f"{n} in {shorten(d)}" for d, n in r["absent_by_directory"].items()))
        for r in rows:
            for p, what in r.get("stdh", []):
                print(f"  {r['name']}: .stdh probe {shorten(p)} ({what})")
        if args.keep:
            print(f"traces kept in {tmp}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
