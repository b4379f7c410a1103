#!/usr/bin/env bash
# Many SIGKILLs at random moments during precompute, then a final run that must end with a cache
# bit-identical to an uninterrupted run. Usage: scripts/tools/kill_loop.sh [KILLS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup.sh >/dev/null
BUILD=$(cd "${BUILD_DIR:-build}" && pwd)
FIXTURES=$(mktemp -d /tmp/embcache-kill-fixtures-XXXXXX)
trap 'rm -rf "$FIXTURES"' EXIT
/usr/bin/python3 tests/python/fixtures.py encoders "$FIXTURES"
KILLS=${1:-50} SEED=${2:-$RANDOM} EMBCACHE=$BUILD/apps/embcache/embcache EMBCACHE_FIXTURES=$FIXTURES \
  PYTHON=/usr/bin/python3 FIXTURES_PY=$PWD/tests/python/fixtures.py bash tests/e2e/e2e_crash.sh
