#!/bin/bash
# Issue 39's four classes of stale hits under `cucore run`, with the program's own option arrays
# (tests/dropin/stale_classes.c, NVRTC opened by path, --no-preload): each compile, in fresh
# processes over a fresh cache (CUCORE_CACHE_DIR), gives what the real library gives without
# cucore at that moment (the oracle: compile result, PTX or cubin bytes, log), and is never a hit:
#  1. the clock: -DSTAMP=__TIME__, --define-macro=STAMP=__TIME__, -D STAMP=__TIME__,
#     CAT(__TI,ME__) and T(TIME) pasted: bypassed; two runs 1.1 s apart give two times, each the
#     time of its own run;
#  2. a ptxas options file (-Xptxas=--options-file=F, -Xptxas=-optf=F,
#     --ptxas-options=--options-file=F), edited between runs (--maxrregcount=24, 64 of the same
#     length, -v, an invalid value, garbage): bypassed, each result the real library's;
#  3. #include "/proc/sys/kernel/ostype": not stored, the second process misses again;
#  4. __has_include/#include of "/dev/stdin" and "/proc/self/fd/0", stdin from a file (then the
#     file edited), /dev/null, a pipe, closed, a file again: each result the real library's, not
#     stored where NVRTC read it.
# On this toolkit's NVRTC and on the 13.5 and 12.9 roots of scripts/fetch-cuda-versions.sh where
# they are present (a missing root is skipped, said on stdout).
# Usage: run_stale_classes.sh CUCORE PROGRAM DROPIN_DIR REAL_NVRTC [SOURCE_DIR]
set -u
cucore=$1 program=$2 dropins=$3 system_nvrtc=$4 src=${5:-}
for f in "$cucore" "$program"; do
  if [ ! -x "$f" ]; then
    echo "skipped: $f is not built"
    exit 77
  fi
done
if [ ! -e "$system_nvrtc" ]; then
  echo "skipped: no real NVRTC ($system_nvrtc)"
  exit 77
fi
versions=${CUCORE_CUDA_VERSIONS_DIR:-${src:+$src/.cache/cuda-versions}}
work=$(mktemp -d "${TMPDIR:-/tmp}/cucore-stale-classes-XXXXXX")
trap 'rm -rf "$work"' EXIT
unset CUCORE_LOG CUCORE_RUN_CACHE CUCORE_RUN_LD_LIBRARY_PATH CUCORE_RUN_NVRTC CUCORE_RUN_NVRTC12 \
  CUCORE_RUN_LIBS CUCORE_REMOTE_CACHE CUCORE_CACHE_DIR XDG_CACHE_HOME CUCORE_CACHE_SHARED \
  CUCORE_SLOPPINESS NVRTC_APPEND_FLAGS
# ptxas's driver-side compute cache would make the log depend on earlier compiles (run_harness.sh).
export CUDA_CACHE_DISABLE=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
expect() { if [ "$1" = "$2" ]; then ok "$3"; else bad "$3: got \"$1\", want \"$2\""; fi; }

# What is compared: all but ptxas's "Compile time = N ms" (-v), not a function of the inputs (nor
# the log's size, which counts its digits: the log's text is compared), and the clock cases' time
# string (s[], checked apart: each run's own time).
normal() {
  sed -e 's/Compile time = [0-9.]* ms/Compile time = T ms/' -e 's/^log [0-9]*$/log N/' \
    -e 's/\.b8 s\[9\] = {[0-9, ]*}/.b8 s[9] = {TIME}/' "$1"
}
# $1 name; the rest: the case (and FILE). stdin is the caller's. → $work/$name.out, .rc
plain() {
  local name=$1
  shift
  timeout 120 "$program" "$real" "$@" >"$work/$name.out" 2>"$work/$name.err"
  echo $? >"$work/$name.rc"
}
# $1 name, $2 cache; the rest: the case (and FILE). → $work/$name.out, .err (CUCORE_LOG=info), .rc
under() {
  local name=$1 cache=$2
  shift 2
  CUCORE_LOG=info CUCORE_CACHE_DIR=$cache timeout 120 "$cucore" run --no-preload --nvrtc "$real" \
    -- "$program" "$dropin" "$@" >"$work/$name.out" 2>"$work/$name.err"
  echo $? >"$work/$name.rc"
}
# $1 label, $2 the run under cucore, $3 the oracle's run: exit status and every byte printed.
same() {
  local label=$1 a=$2 b=$3
  if [ "$(cat "$work/$a.rc")" = "$(cat "$work/$b.rc")" ] &&
    [ "$(normal "$work/$a.out")" = "$(normal "$work/$b.out")" ]; then
    ok "$label: the real library's result ($(cat "$work/$a.rc"), $(head -n 1 "$work/$a.out"), $(sed -n 2p "$work/$a.out" | cut -c1-40))"
  else
    bad "$label: not the real library's result (exit $(cat "$work/$a.rc") against $(cat "$work/$b.rc")):"
    diff <(normal "$work/$b.out") <(normal "$work/$a.out") | head -n 20
    cat "$work/$a.err"
  fi
}
# $1 label, $2 a run under cucore, $3 the log line wanted (bypass / not storing): never a hit.
logged() {
  local label=$1 run=$2 want=$3
  if grep -q 'info: hit ' "$work/$run.err"; then
    bad "$label: a hit:"
    cat "$work/$run.err"
  elif ! grep -qE "info: ($want) " "$work/$run.err"; then
    bad "$label: no \"$want\" in CUCORE_LOG=info's log:"
    cat "$work/$run.err"
  else
    ok "$label: $want, not a hit"
  fi
}
# The time string in a PTX (the bytes of s[]), as HH:MM:SS.
stamp() {
  local n text=""
  for n in $(sed -n 's/.*\.b8 s\[9\] = {\([0-9, ]*\)}.*/\1/p' "$work/$1.out" | tr ',' ' '); do
    text+=$(printf '%b' "\\0$(printf %03o "$n")")
  done
  echo "$text"
}
seconds() { local h m s; IFS=: read -r h m s <<<"$1"; echo $((10#$h * 3600 + 10#$m * 60 + 10#$s)); }
now() { seconds "$(date +%H:%M:%S)"; }
# $1 label, $2 run, $3 $4 the seconds of the day before and after it: its time is its own.
in_time() {
  local t
  t=$(stamp "$2")
  if ! [[ "$t" =~ ^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]$ ]]; then
    bad "$1: no time in the PTX (\"$t\")"
  elif [ "$4" -lt "$3" ]; then
    ok "$1: $t (midnight passed: not compared with the clock)"
  elif [ "$(seconds "$t")" -ge "$3" ] && [ "$(seconds "$t")" -le "$4" ]; then
    ok "$1: the time of its own run ($t)"
  else
    bad "$1: $t is not the time of its run ($3..$4 s of the day)"
  fi
}

run_version() {  # VERSION REAL_NVRTC
  local v=$1
  real=$2
  dropin=$dropins/$(basename "$real")
  if [ ! -e "$dropin" ]; then
    bad "$v: no drop-in $dropin"
    return
  fi
  echo "== NVRTC $v: $real"
  local c t0 t1 i w s content contents name where

  # 1. The clock. Run 1 of each spelling, 1.1 s, run 2 of each: a stale hit would repeat run 1.
  local clocks=(clock_D clock_define_macro clock_D_split clock_paste clock_paste_param)
  declare -A before after
  for c in "${clocks[@]}"; do
    plain "$v-$c-plain" "$c"
    before[$c]=$(now)
    under "$v-$c-1" "$work/cache-$v-$c" "$c"
    after[$c]=$(now)
  done
  sleep 1.1
  for c in "${clocks[@]}"; do
    t0=$(now)
    under "$v-$c-2" "$work/cache-$v-$c" "$c"
    t1=$(now)
    for i in 1 2; do
      # The real library's PTX but for the time, which is the run's own.
      same "$v $c, run $i" "$v-$c-$i" "$v-$c-plain"
      logged "$v $c, run $i" "$v-$c-$i" bypass
    done
    in_time "$v $c, run 1" "$v-$c-1" "${before[$c]}" "${after[$c]}"
    in_time "$v $c, run 2" "$v-$c-2" "$t0" "$t1"
    if [ -n "$(stamp "$v-$c-1")" ] && [ "$(stamp "$v-$c-1")" != "$(stamp "$v-$c-2")" ]; then
      ok "$v $c: run 2's time is not run 1's"
    else
      bad "$v $c: run 2 repeats run 1's time ($(stamp "$v-$c-1"))"
    fi
  done

  # 2. A ptxas options file, edited between runs (24 and 64: the same length).
  contents=("--maxrregcount=24" "--maxrregcount=64" "-v" "--maxrregcount=oops" "garbage!")
  for c in optf_X optf_X_short optf_ptxas_options; do
    declare -A results=()
    for i in "${!contents[@]}"; do
      content=${contents[$i]}
      printf '%s\n' "$content" >"$work/ptxas-options"
      plain "$v-$c-$i-plain" "$c" "$work/ptxas-options"
      results[$(normal "$work/$v-$c-$i-plain.out" | head -n 2 | tr '\n' ' ')]=1
      for w in 1 2; do
        under "$v-$c-$i-$w" "$work/cache-$v-$c" "$c" "$work/ptxas-options"
        same "$v $c, file \"$content\", process $w" "$v-$c-$i-$w" "$v-$c-$i-plain"
        logged "$v $c, file \"$content\", process $w" "$v-$c-$i-$w" bypass
      done
    done
    # The edits matter to the real library (else the case proves nothing).
    if [ "${#results[@]}" -ge 4 ]; then
      ok "$v $c: the real library gives ${#results[@]} different results for the 5 files"
    else
      bad "$v $c: the real library gives only ${#results[@]} different results for the 5 files"
    fi
    unset results
  done

  # 3. A procfs file #included.
  plain "$v-procfs-plain" procfs
  for w in 1 2; do
    under "$v-procfs-$w" "$work/cache-$v-procfs" procfs
    same "$v procfs, process $w" "$v-procfs-$w" "$v-procfs-plain"
    logged "$v procfs, process $w" "$v-procfs-$w" "not storing"
  done

  # 4. The process's own stdin, by name: from a file, the file edited, /dev/null, a pipe, closed.
  for c in stdin_dev stdin_fd; do
    for where in file edited null pipe closed file-again; do
      case $where in
        file) echo '__device__ int from_the_file = 7;' >"$work/stdin.cu" ;;
        edited) echo '__device__ int from_the_file = 8;' >"$work/stdin.cu" ;;
        file-again) echo '__device__ int from_the_file = 9;' >"$work/stdin.cu" ;;
      esac
      name=$v-$c-$where
      for w in plain 1 2; do
        local cmd=(plain "$name-plain" "$c")
        [ "$w" != plain ] && cmd=(under "$name-$w" "$work/cache-$v-$c" "$c")
        case $where in
          file | edited | file-again) "${cmd[@]}" <"$work/stdin.cu" ;;
          null) "${cmd[@]}" </dev/null ;;
          pipe) "${cmd[@]}" < <(cat "$work/stdin.cu") ;;
          closed) "${cmd[@]}" <&- ;;
        esac
      done
      for w in 1 2; do
        # Closed, the name is the first file the process opens next: under cucore run that must
        # not be one of the cache's (NVRTC would #include it).
        same "$v $c, stdin $where, process $w" "$name-$w" "$name-plain"
        logged "$v $c, stdin $where, process $w" "$name-$w" "not storing|bypass"
      done
    done
  done
}

ran=0
run_version system "$system_nvrtc"
ran=$((ran + 1))
for pair in 13.5:lib/libnvrtc.so.13 12.9:lib/libnvrtc.so.12; do
  v=${pair%%:*}
  lib=${versions:+$versions/$v/root/${pair#*:}}
  if [ -z "$lib" ] || [ ! -e "$lib" ]; then
    echo "skipped: NVRTC $v (no ${lib:-root}: scripts/fetch-cuda-versions.sh makes it)"
    continue
  fi
  run_version "$v" "$lib"
  ran=$((ran + 1))
done

echo "$pass passed, $fail failed ($ran NVRTC versions)"
[ "$fail" -eq 0 ]
