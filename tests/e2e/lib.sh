# Shared helpers for end-to-end tests; ctest sets EMBCACHE, EMBCACHE_FIXTURES, PYTHON, FIXTURES_PY.
set -euo pipefail
: "${EMBCACHE:?run through ctest}" "${EMBCACHE_FIXTURES:?}" "${PYTHON:?}" "${FIXTURES_PY:?}"
WORK=$(mktemp -d /tmp/embcache-e2e-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
ENC=$EMBCACHE_FIXTURES

fx() { "$PYTHON" "$FIXTURES_PY" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_error CODE PATTERN cmd...: the command exits with CODE and prints exactly one stderr
# line that contains PATTERN (and no abort or backtrace).
expect_error() {
  local code=$1 pattern=$2
  shift 2
  local rc=0
  "$@" >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
  [[ $rc -eq $code ]] || fail "expected exit $code, got $rc from: $* ($(cat "$WORK/err.txt"))"
  [[ $(wc -l <"$WORK/err.txt") -eq 1 ]] || fail "expected one stderr line from: $*; got: $(cat "$WORK/err.txt")"
  grep -q -- "$pattern" "$WORK/err.txt" || fail "stderr lacks '$pattern': $(cat "$WORK/err.txt")"
  ! grep -qiE "terminate called|abort|backtrace|Exception raised from" "$WORK/err.txt" || fail "abort/backtrace in: $(cat "$WORK/err.txt")"
  echo "ok: exit $code: $(cat "$WORK/err.txt")"
}
