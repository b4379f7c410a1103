#!/usr/bin/env bash
# Explores tests/fuzz/'s targets with libFuzzer (clang-14, AddressSanitizer and
# UndefinedBehaviorSanitizer; docs/reliability.md), each for MINUTES, starting from its seed
# corpus. New inputs go to build-fuzz/corpus/TARGET/; a crash, leak, timeout or OOM is saved in
# build-fuzz/findings/TARGET/ and fails the run: fix it, and copy the input into
# tests/fuzz/corpus/TARGET/ so CI replays it (ctest's fuzz_TARGET).
# Usage: scripts/fuzz.sh [MINUTES (10)] [TARGET...]   (targets: tests/fuzz/fuzz_*.cpp)
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.cpp; do t=${f##*/fuzz_}; targets+=("${t%.cpp}"); done
fi
[[ -n ${SKIP_SETUP:-} ]] || scripts/setup.sh >/dev/null
command -v clang++-14 >/dev/null || { echo "fuzz.sh: clang++-14 is missing (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 2; }
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 \
  -DEMBCACHE_TORCH=system -DEMBCACHE_SANITIZE=address,undefined "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link" \
  -DEMBCACHE_FUZZ=ON >/dev/null
supp=$PWD/tests/sanitizers
export ASAN_OPTIONS="halt_on_error=1:suppressions=$supp/asan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
failed=0
for t in "${targets[@]}"; do
  cmake --build build-fuzz --target "fuzz_$t" -j "${JOBS:-$(nproc)}" >/dev/null
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/findings/$t"
  echo "== fuzz_$t: $minutes min =="
  rc=0
  build-fuzz/tests/fuzz_$t -max_total_time=$((minutes * 60)) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/findings/$t/" "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" \
    >"build-fuzz/fuzz_$t.log" 2>&1 || rc=$?
  runs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "build-fuzz/fuzz_$t.log" | grep -o "[0-9]*$" || echo "?")
  cov=$(grep -o "cov: [0-9]* ft: [0-9]*" "build-fuzz/fuzz_$t.log" | tail -1 || true)
  echo "fuzz_$t: exit $rc, $runs executions in $minutes min ($cov); corpus $(ls "build-fuzz/corpus/$t" | wc -l) inputs; findings: $(ls "build-fuzz/findings/$t" | wc -l)"
  ((rc == 0)) || { failed=1; tail -40 "build-fuzz/fuzz_$t.log"; }
done
exit $failed
