#!/usr/bin/env bash
# Precompute benchmark: a light encoder (I/O bound) and a heavy one (compute bound) through the
# real pipeline, each compared with (a) the same batches through a freshly loaded copy of the
# encoder alone in the same process (its first, slower calls included, as they are in the run) and
# (b) plain uncompressed HDF5 writes measured in the same process.
# Targets: heavy wall / encoder-only <= 1.10; light MB/s >= 0.5 x plain HDF5 MB/s (docs/performance.md).
# Usage: scripts/bench_precompute.sh [WORK_DIR]   (default: a temporary directory)
#        ONLY=REGEX runs only the configurations whose label matches (ONLY='^bench-heavy$').
# From an existing build (a GPU node, no apt): BUILD_DIR=DIR with DIR/apps/embcache/embcache built
# skips scripts/setup.sh, and PYTHON=any python with torch, h5py and numpy (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
[[ -n ${BUILD_DIR:-} && -x $BUILD/apps/embcache/embcache ]] || scripts/setup.sh >/dev/null
WORK=${1:-$(mktemp -d /tmp/embcache-bench-XXXXXX)}
mkdir -p "$WORK"
PY=${PYTHON:-/usr/bin/python3}
FX=tests/python/fixtures.py
$PY $FX encoders "$WORK/enc"
[[ -f $WORK/light.h5 ]] || $PY $FX dataset "$WORK/light.h5" --n 1000 --height 64 --width 64 --dtype uint8
[[ -f $WORK/heavy.h5 ]] || $PY $FX dataset "$WORK/heavy.h5" --n 600 --height 96 --width 96 --dtype uint8
BENCH=$BUILD/bench/bench_precompute

REPEATS=${REPEATS:-5}
# Figures on a small VM vary 10-20% run to run: each configuration runs REPEATS times and the
# median run (by the figure its target is about) is printed, with the range of that figure. The
# machine's speed also drifts within a run, so one run's wall / encoder-only can be off by 5%
# either way.
run() {  # run LABEL KEY ENCODER DATASET [options]; KEY: the summary field the median is taken by
  local label=$1 key=$2 enc=$3 data=$4
  shift 4
  [[ -z ${ONLY:-} || $label =~ $ONLY ]] || return 0
  for i in $(seq "$REPEATS"); do
    # Each run starts with no dirty pages: the gigabytes earlier runs wrote are otherwise still
    # being written back, which throttles this run's writes (and its yardstick's) to disk speed.
    sync
    # A "new-file" configuration writes a new cache each run and keeps the earlier ones until it
    # ends, so no page-cache memory freed a moment before is there to reuse (a first precompute
    # into a new cache); the others overwrite one file, whose pages the next run reuses.
    local out="$WORK/out-$label.h5"
    if [[ $label == *new-file* ]]; then out="$WORK/out-$label-$i.h5"; fi
    "$BENCH" --encoder "$WORK/enc/$enc" --dataset "$WORK/$data" --out "$out" "$@" >"$WORK/$label-$i.json"
  done
  # The outputs are not used afterwards: gigabytes of them left in the page cache only change
  # the memory state the next configurations run in.
  rm -f "$WORK/out-$label.h5" "$WORK/out-$label-"*.h5
  rm -rf "$WORK/out-$label.h5.runs" "$WORK/out-$label.h5.parts"
  $PY - "$WORK" "$label" "$key" "$REPEATS" <<'PY'
import json, sys
work, label, key, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = sorted((json.load(open(f"{work}/{label}-{i}.json")) for i in range(1, repeats + 1)), key=lambda j: j[key])
j = runs[len(runs) // 2]
s = j["stage_seconds"]
print(f"{label:<22} {j['crops_per_second']:8.1f} crops/s {j['mb_per_second']:8.1f} MB/s  "
      f"batch {j['batch_size']:<3} wall {j['seconds']:.2f}s  encoder-only {j['encoder_only_seconds']:.2f}s "
      f"(first 2 calls {j['encoder_only_first_calls_seconds']:.2f}s)  "
      f"wall/encoder-only {j['wall_over_encoder_only']:.3f}  plain HDF5 {j['plain_hdf5_write_mb_per_second']:.0f} MB/s "
      f"(before/after the run {'/'.join(str(round(x)) for x in j['plain_hdf5_write_mb_per_second_before_after'])})  "
      f"MB/s over plain {j['mb_per_second_over_plain']:.2f}")
print(f"{'':<22} {key}: median {j[key]:.3f}, range {runs[0][key]:.3f}-{runs[-1][key]:.3f} over {repeats} runs")
# wall / encoder-only = (encoder calls in the run + everything else) / encoder-only: the pipeline's
# own cost (start-up, the encoder's waits, the tail) and how fast the encoder ran beside the
# stages, apart.
other = j["seconds"] - j["encoder_seconds"]
before, after = j["seconds_before_first_encoder_call"], j["seconds_after_last_encoder_call"]
print(f"{'':<22} = encoder calls in the run / encoder-only {j['encoder_seconds'] / j['encoder_only_seconds']:.3f}"
      f" + the rest of the wall time {other:.2f}s / encoder-only {other / j['encoder_only_seconds']:.3f}"
      f" (before the first call {before:.3f}s, between calls {other - before - after:.3f}s, after the last {after:.3f}s)")
print(f"{'':<22} busy seconds (wall): " + "  ".join(f"{k} {v:.3f}" for k, v in s.items()))
print(f"{'':<22} stage CPU seconds: " + "  ".join(f"{k} {v:.3f}" for k, v in j['stage_cpu_seconds'].items()) +
      f"  | {j['threads']} encoder threads, stages {j['stage_priority']}, "
      f"{j['feature_bytes_per_encoder_second'] / 1e9:.2f} GB/s of features per encoder second")
PY
}

LIGHT=mb_per_second_over_plain
HEAVY=wall_over_encoder_only
echo "== light encoder (1x1 conv to 64 channels, 32x32 crops: 256 KiB of features per crop); target: MB/s over plain >= 0.5 =="
run light-nofsync $LIGHT light.pt light.h5 --crop-size 32 --batch-size 16 --fsync-off
run light-fsync $LIGHT light.pt light.h5 --crop-size 32 --batch-size 16
run light-segments $LIGHT light.pt light.h5 --crop-size 32 --batch-size 16 --fsync-off --segment-mb 128
run light-float16 $LIGHT light.pt light.h5 --crop-size 32 --batch-size 16 --fsync-off --dtype float16
echo "== heavy encoder (ResNet-18-like: 13 convs, 64/128 wide, 48x48 crops); target: wall/encoder-only <= 1.10 =="
run bench-heavy $HEAVY bench_heavy.pt heavy.h5 --crop-size 48 --batch-size 16 --plain-write-mb 256
run bench-heavy-nofsync $HEAVY bench_heavy.pt heavy.h5 --crop-size 48 --batch-size 16 --fsync-off --plain-write-mb 256
run bench-heavy-auto $HEAVY bench_heavy.pt heavy.h5 --crop-size 48 --plain-write-mb 256
# With a core the encoder does not use, the stages need no gaps: what is left is the encoder's
# own speed beside them.
run bench-heavy-spare-core $HEAVY bench_heavy.pt heavy.h5 --crop-size 48 --batch-size 16 --threads 1 --plain-write-mb 256
# A long run in miniature: runs past --commit-seconds commit many times (here every 64 MiB).
run bench-heavy-commits $HEAVY bench_heavy.pt heavy.h5 --crop-size 48 --batch-size 16 --segment-mb 64 --plain-write-mb 256
# Every run into a new file: on a VM that reports free memory to its host, the page-cache writes
# then touch memory the host reclaimed, and cost the encoder's cores; --drop-behind
# evicts written ranges once on disk, so the writes reuse those pages.
run bench-heavy-new-file $HEAVY bench_heavy.pt heavy.h5 --crop-size 48 --batch-size 16 --plain-write-mb 256
run bench-heavy-new-file-drop-behind $HEAVY bench_heavy.pt heavy.h5 --crop-size 48 --batch-size 16 --plain-write-mb 256 \
  --drop-behind
echo "== the tests' smaller compute-bound encoder (9 convs, 48/96 wide) =="
run fixture-heavy $HEAVY heavy.pt heavy.h5 --crop-size 48 --batch-size 16 --fsync-off --plain-write-mb 256
echo "results: $WORK/*.json"
