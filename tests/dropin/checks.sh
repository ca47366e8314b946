# Sourced by the drop-in tests' scripts: their work directory and their checks.
# work_dir NAME: $work, a fresh directory named NAME-XXXXXX under $TMPDIR, removed at exit.
work_dir() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1-XXXXXX")
  trap 'rm -rf "$work"' EXIT
}
# One check passed (ok) or failed (bad): counted and said.
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
# expect VALUE WANT WHAT: a one-line VALUE is shown with a passed check.
expect() {
  if [ "$1" != "$2" ]; then
    bad "$3: got '$1', want '$2'"
  elif [ "${1//$'\n'/}" = "$1" ]; then
    ok "$3 ($1)"
  else
    ok "$3"
  fi
}
# harness_run LABEL ENV...: $harness with "${harness_args[@]}" and ENV added to the environment,
# its stdout in $work/out and stderr in $work/err; a check that it passed (its last line shown).
harness_run() {
  local label=$1
  shift
  if env "$@" "$harness" "${harness_args[@]}" >"$work/out" 2>"$work/err"; then
    ok "$label: $(tail -n 1 "$work/out")"
  else
    bad "$label"
    cat "$work/out" "$work/err"
  fi
}
# How many lines of the last harness_run's stderr hold $1.
count() { grep -c -- "$1" "$work/err"; }
# make_venv PYTHON VENV NVIDIA: a venv with PYTHON's packages (linked) and NVIDIA (a site's nvidia
# directory: NVIDIA's wheels of one CUDA version) as its nvidia package; fails if venv does.
make_venv() {
  local python=$1 venv=$2 nvidia=$3 base site entry
  "$python" -m venv --without-pip "$venv" || return 1
  base=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  for entry in "$base"/*; do
    [ -e "$site/$(basename "$entry")" ] || ln -s "$entry" "$site/"
  done
  rm -f "$site/nvidia"
  ln -s "$nvidia" "$site/nvidia"
}
# The counts; the script's status (fails when a check did).
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
