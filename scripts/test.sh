#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite through ctest.
# Usage: scripts/test.sh [--sanitize] [--tsan] [--debian13-root] [CTEST_ARGS...]
#   --sanitize  then builds a second tree (build-sanitize/) with AddressSanitizer and
#               UndefinedBehaviorSanitizer and runs the whole suite again there but the trials
#               (label "trials": they run once, in the first leg); any report fails it.
#               Suppressions (tests/sanitizers/) cover reports inside LibTorch, libgomp or HDF5
#               only, each with its reason.
#   --tsan      then builds build-tsan/ with ThreadSanitizer and runs the tests it gives a clean
#               signal on (TSAN_TESTS below; docs/architecture.md says what it covers and why).
#   --debian13-root  then runs the whole suite but the trials again in a Debian 13 root made by
#               mmdebstrap (scripts/env/debian_root.sh: reused while its package list is unchanged
#               on this machine), building in build-debian13/. Needs root. CI runs it on its
#               Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=0 tsan=0 debian13=0
while [[ ${1:-} == --sanitize || ${1:-} == --tsan || ${1:-} == --debian13-root ]]; do
  [[ $1 == --sanitize ]] && sanitize=1
  [[ $1 == --tsan ]] && tsan=1
  [[ $1 == --debian13-root ]] && debian13=1
  shift
done
JOBS=${JOBS:-$(nproc)}
scripts/setup.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "$JOBS" --timeout 900 "$@")
if ((sanitize)); then
  echo "== the same suite under AddressSanitizer and UndefinedBehaviorSanitizer (build-sanitize/) =="
  BUILD_DIR=build-sanitize EMBCACHE_SANITIZE=address,undefined scripts/setup.sh
  supp=$PWD/tests/sanitizers
  # detect_leaks: LibTorch and HDF5 keep allocations for the process's life (see lsan.supp).
  export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:suppressions=$supp/asan.supp"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
  (cd build-sanitize && ctest --output-on-failure -j "$JOBS" --timeout 1800 -LE trials "$@")
fi
if ((tsan)); then
  echo "== the unit tests under ThreadSanitizer (build-tsan/) =="
  BUILD_DIR=build-tsan EMBCACHE_SANITIZE=thread scripts/setup.sh
  (cd build-tsan && ctest -R fixtures_encoders >/dev/null)
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp"
  export EMBCACHE_FIXTURES=$PWD/build-tsan/tests/fixtures TEST_DATA=$PWD/tests/data
  # Every unit test case in one process but two, with no suppression. Left out: the allocator
  # test (TSan replaces malloc, as ASan does) and the test whose OpenMP team waits on our
  # condition variable: libgomp is not built for TSan, so the barrier that orders those accesses
  # is invisible to it and it reports races that are not there (end-to-end runs, where the
  # encoder's intra-op regions run on libgomp threads, report the same).
  build-tsan/tests/embcache_unit_tests "-tce=the encoder's waits hold*,the encoder allocator scope*"
fi
if ((debian13)); then
  echo "== the whole suite in a Debian 13 root (scripts/env/debian_root.sh trixie, build-debian13/) =="
  JOBS=$JOBS BUILD_DIR=build-debian13 scripts/env/debian_root.sh trixie -- scripts/test.sh -LE trials "$@"
fi
