#!/bin/bash
# CUCORE_TRACE (docs/trace.md): an unmodified cuda.core program compiling 20 kernels, run twice
# under `cucore run` with one trace file, and `cucore compile` once more into it. The file is the
# Chrome trace-event JSON array format (the closing bracket optional): it parses once closed, every
# event is well formed, and there is one "program" event per compile and per hit (20 misses, then
# 20 hits) with its outcome, a "compile" event per miss, a process name per process.
# Usage: run_trace.sh CUCORE PYTHON
set -u
cucore=$1 python=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-trace-XXXXXX")
trap 'rm -rf "$work"' EXIT
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_REMOTE_CACHE
export CUCORE_TRACE=$work/trace.json
cat >"$work/twenty.py" <<'PY'
from cuda.core import Program, ProgramOptions
for i in range(20):
    code = 'extern "C" __global__ void k%d(int* p) { p[threadIdx.x] = %d; }' % (i, i)
    p = Program(code, "c++", ProgramOptions(arch="sm_90", name="k%d.cu" % i))
    p.compile("cubin")
    p.close()
PY
for run in 1 2; do
  (cd "$work" && "$cucore" run --cache "dir:$work/cache" -- "$python" twenty.py) ||
    { echo "FAILED: run $run"; exit 1; }
done
printf 'extern "C" __global__ void one(int* p) { *p = 1; }\n' >"$work/one.cu"
(cd "$work" && "$cucore" compile --arch sm_90 --cache "dir:$work/cache" -o one.cubin one.cu >/dev/null) ||
  { echo "FAILED: cucore compile"; exit 1; }
"$python" - "$CUCORE_TRACE" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
assert text.startswith("[\n"), "the file must open the array"
body = text.rstrip()
if body.endswith(","):
    body = body[:-1]
events = json.loads(body + "]")  # what the viewers do with an unclosed array
failures = []
for e in events:
    for field in ("name", "ph", "pid", "tid"):
        if field not in e:
            failures.append("an event without %s: %r" % (field, e))
    if e.get("ph") == "X" and not (isinstance(e.get("ts"), int) and isinstance(e.get("dur"), int)):
        failures.append("a complete event without ts/dur: %r" % e)
programs = [e for e in events if e.get("cat") == "program"]
names = lambda outcome: sorted(e["name"] for e in programs if e["args"].get("outcome") == outcome)
kernels = sorted("k%d.cu" % i for i in range(20))
misses = [e for e in programs if e["args"].get("outcome") in ("compiled", "unclaimed", "took_over", "gave_up")]
hits = names("hit")
compiles = [e for e in events if e.get("cat") == "compiler" and e["name"] == "compile"]
processes = {e["pid"] for e in events if e["name"] == "process_name" and e["ph"] == "M"}
print("events %d: program %d (misses %d, hits %d), compile %d, processes %d" % (
    len(events), len(programs), len(misses), len(hits), len(compiles), len(processes)))
if sorted(e["name"] for e in misses if e["name"] != "one.cu") != kernels:
    failures.append("misses: want one per kernel, got %s" % sorted(e["name"] for e in misses))
if hits != kernels:
    failures.append("hits: want one per kernel, got %s" % hits)
if len(compiles) != 21:
    failures.append("compile events: want 21 (20 kernels and one.cu), got %d" % len(compiles))
if len(processes) < 3:
    failures.append("want a process name for each of the 3 processes, got %d" % len(processes))
for f in failures:
    print("FAILED:", f)
sys.exit(1 if failures else 0)
PY
