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
# The counts; the script's status (fails when a check did).
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
