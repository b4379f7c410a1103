#!/usr/bin/env bash
# SIGKILL at random moments: every later run opens the cache, keeps what was committed, and the
# final cache holds features bit-identical to an uninterrupted run. A reader polling the cache
# meanwhile sees a consistent cache or a clear "being written" error, never garbage.
# KILLS (default 5) sets the number of kills; scripts/tools/kill_loop.sh runs many more.
source "$(dirname "$0")/lib.sh"
KILLS=${KILLS:-5}
SEED=${SEED:-$RANDOM}
echo "kills=$KILLS seed=$SEED"
RANDOM=$SEED

fx dataset crash.h5 --n 400 --height 64 --width 96 --dtype uint8 --splits --masks
OPTS=(--encoder "$ENC/heavy.pt" --dataset crash.h5 --crop-size 48 --overlap 4 --batch-size 8
      --dtype float16 --quiet --commit-seconds 0.2)
"$EMBCACHE" precompute "${OPTS[@]}" --out reference.h5 --no-fsync

check_readable() {  # the cache, if present, opens and every column has the same row count
  [[ -e cache.h5 ]] || return 0
  "$PYTHON" - <<'PY'
import h5py
with h5py.File("cache.h5", "r") as f:
    n = f["index/window"].shape[0]
    for path in ["index/group", "index/split", "index/bounds", "index/pixel_hash", "levels/0", "levels/1", "labels/mask"]:
        assert f[path].shape[0] == n, (path, f[path].shape, n)
    f["levels/1"][max(0, n - 5):n]  # data readable, checksums pass
PY
}

kills=0
cycles=0
for ((k = 1; k <= KILLS; k++)); do
  # Whether anything was committed before this run: with nothing, a reader that comes before the
  # run has locked its folder rightly finds no cache at all. Only a renamed record (seg-N.h5) is a
  # commit: seg-N.h5.partial is one a kill cut short, which the next run deletes.
  committed=0
  if [[ -e cache.h5 ]] || compgen -G "cache.h5.runs/*/seg-*.h5" >/dev/null; then committed=1; fi
  "$EMBCACHE" precompute "${OPTS[@]}" --out cache.h5 >/dev/null 2>run.err &
  pid=$!
  delay=$(printf "0.%03d" $((150 + RANDOM % 850)))
  sleep "$delay"
  # A concurrent reader: succeeds, says the cache is being written (exit 4), or there is no cache
  # yet (exit 3): none at all while nothing has been committed, else the commits an interrupted
  # run left (before the new run has taken its lock); nothing else.
  rc=0
  "$EMBCACHE" inspect cache.h5 --json >/dev/null 2>inspect.err || rc=$?
  case $rc in
    0) ;;
    4) grep -q "being written" inspect.err || fail "reader: $(cat inspect.err)" ;;
    3) if [[ $committed == 0 ]]; then
         grep -q "no such cache file" inspect.err || fail "reader during a write: $(cat inspect.err)"
       else
         grep -q "no cache yet, but an interrupted run left [0-9]* commits" inspect.err ||
           fail "reader during a write: exit 3 with commits on disk: $(cat inspect.err)"
       fi ;;
    *) fail "reader during a write: exit $rc: $(cat inspect.err)" ;;
  esac
  if kill -9 "$pid" 2>/dev/null; then
    kills=$((kills + 1))
    wait "$pid" || true
    check_readable || fail "cache unreadable after kill $k (delay $delay)"
    echo "kill $k after ${delay}s: cache readable, $(ls cache.h5.runs/all/seg-*.h5 2>/dev/null | wc -l) commit records pending, $(ls cache.h5.runs/all/seg-*.partial 2>/dev/null | wc -l) cut short"
  else
    # The run finished before the kill: the cycle is complete. Check it, then start over so
    # later kills land mid-run again.
    wait "$pid" || fail "run $k failed: $(cat run.err)"
    fx same reference.h5 cache.h5 >/dev/null || fail "cycle ending at run $k: cache differs from the reference"
    cycles=$((cycles + 1))
    echo "run $k finished before the kill: cache identical to the reference; starting a new cycle"
    rm -rf cache.h5 cache.h5.runs cache.h5.parts
  fi
done
[[ $kills -ge 1 ]] || fail "no run was killed; the workload is too small for this machine"

"$EMBCACHE" precompute "${OPTS[@]}" --out cache.h5 --summary-json final.json
fx same reference.h5 cache.h5
[[ ! -e cache.h5.runs ]] || { find cache.h5.runs -ls; fail "segments left after a finished run"; }
[[ ! -e cache.h5.lock && ! -e cache.h5.tmp ]] || fail "lock or tmp file left after a finished run"
echo "e2e_crash: $kills kills over $((cycles + 1)) cycles, final cache identical to the uninterrupted run"

# A directory sync that fails after a commit record is renamed in: the run stops in one line, and
# the commit stays good, so the next run recovers its rows instead of computing them again.
rm -rf cache.h5 cache.h5.runs cache.h5.parts
command -v strace >/dev/null || fail "strace is missing (scripts/setup.sh installs it)"
mkdir -p cache.h5.runs/all
# LeakSanitizer cannot run under ptrace; the sanitizer build checks leaks in every other run.
expect_error 4 "cannot sync cache.h5.runs/all" env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
  strace -f -qq -o /dev/null -P "$PWD/cache.h5.runs/all" -e trace=fsync -e inject=fsync:error=EIO:when=1 \
  "$EMBCACHE" precompute "${OPTS[@]}" --out cache.h5
"$EMBCACHE" precompute "${OPTS[@]}" --out cache.h5 --summary-json after_sync.json
recovered=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["recovered_rows"])' after_sync.json)
[[ $recovered -gt 0 ]] || fail "the rows of a commit whose directory sync failed were computed again"
fx same reference.h5 cache.h5
echo "e2e_crash: a failed directory sync after a commit kept its $recovered rows"
