#!/usr/bin/env bash
# Reliability trials at length (docs/reliability.md says what each shows; CI runs a fixed sample
# of each through ctest's trials_* tests):
#   faults  tests/trials/fault_trials.py: a file-system call fails (ENOSPC, EIO) at a drawn call
#           in precompute (fresh and incremental), compact, train-probe and a study, and a tmpfs
#           runs out mid-run; each outcome classified, defects listed with their work folders.
#   soak    tests/trials/soak.py: readers (inspect, train-probe, h5py) loop over one cache while
#           three shard writers and compacts change it, cycle after cycle.
# Usage: scripts/trials.sh faults [--trials N (200)] [--seed S (random)] [--families a,b]
#        scripts/trials.sh soak [--seconds S (600)]
# Needs root (the full-disk trials mount a tmpfs) and strace (scripts/setup.sh installs both).
# From an existing build: BUILD_DIR=DIR, PYTHON=a python with torch, h5py and numpy.
set -euo pipefail
cd "$(dirname "$0")/.."
family=${1:?usage: scripts/trials.sh faults|soak [OPTIONS]}
shift
[[ $family == faults || $family == soak ]] || { echo "trials.sh: $family is not faults or soak" >&2; exit 2; }
BUILD=${BUILD_DIR:-build}
[[ -n ${BUILD_DIR:-} && -x $BUILD/apps/embcache/embcache ]] || scripts/setup.sh >/dev/null
PY=${PYTHON:-/usr/bin/python3}
FIXTURES=$(mktemp -d /tmp/embcache-trials-enc-XXXXXX)
trap 'rm -rf "$FIXTURES"' EXIT
$PY tests/python/fixtures.py encoders "$FIXTURES" >/dev/null 2>&1
COMMON=(--embcache "$BUILD/apps/embcache/embcache" --fixtures "$FIXTURES" --json "$BUILD/trials-$family.json")
if [[ $family == faults ]]; then
  trials=200 seed=$RANDOM extra=()
  while (($#)); do
    case $1 in
      --trials) trials=$2; shift 2 ;;
      --seed) seed=$2; shift 2 ;;
      *) extra+=("$1"); shift ;;
    esac
  done
  echo "== faults: $trials trials, seed $seed =="
  $PY tests/trials/fault_trials.py "${COMMON[@]}" --trials "$trials" --seed "$seed" "${extra[@]}"
else
  seconds=600
  [[ ${1:-} == --seconds ]] && seconds=$2
  echo "== soak: $seconds s =="
  $PY tests/trials/soak.py "${COMMON[@]}" --seconds "$seconds"
fi
