#!/usr/bin/env bash
# Precompute benchmark: a light encoder (I/O bound) and a heavy one (compute bound) through the
# real pipeline, each compared with (a) the same batches through the encoder alone in the same
# process and (b) plain uncompressed HDF5 writes measured in the same process.
# Targets (issue 2): heavy wall / encoder-only <= 1.10; light MB/s >= 0.5 x plain HDF5 MB/s.
# Usage: scripts/bench_precompute.sh [WORK_DIR]   (default: a temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
BUILD=${BUILD_DIR:-build}
WORK=${1:-$(mktemp -d /tmp/embcache-bench-XXXXXX)}
mkdir -p "$WORK"
PY=/usr/bin/python3
FX=tests/python/fixtures.py
$PY $FX encoders "$WORK/enc"
[[ -f $WORK/light.h5 ]] || $PY $FX dataset "$WORK/light.h5" --n 1000 --height 64 --width 64 --dtype uint8
[[ -f $WORK/heavy.h5 ]] || $PY $FX dataset "$WORK/heavy.h5" --n 600 --height 96 --width 96 --dtype uint8
BENCH=$BUILD/bench/bench_precompute

run() {  # run LABEL ENCODER DATASET [options]
  local label=$1 enc=$2 data=$3
  shift 3
  "$BENCH" --encoder "$WORK/enc/$enc" --dataset "$WORK/$data" --out "$WORK/out-$label.h5" "$@" >"$WORK/$label.json"
  $PY - "$WORK/$label.json" "$label" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["stage_seconds"]
print(f"{sys.argv[2]:<22} {j['crops_per_second']:8.1f} crops/s {j['mb_per_second']:8.1f} MB/s  "
      f"batch {j['batch_size']:<3} wall {j['seconds']:.2f}s  encoder-only {j['encoder_only_seconds']:.2f}s  "
      f"wall/encoder-only {j['wall_over_encoder_only']:.3f}  plain HDF5 {j['plain_hdf5_write_mb_per_second']:.0f} MB/s  "
      f"MB/s over plain {j['mb_per_second_over_plain']:.2f}")
print(f"{'':<22} busy seconds: " + "  ".join(f"{k} {v:.3f}" for k, v in s.items()) +
      f"  | {j['threads']} encoder threads, stages {j['stage_priority']}")

PY
}

echo "== light encoder (1x1 conv to 64 channels, 32x32 crops: 256 KiB of features per crop) =="
run light-nofsync light.pt light.h5 --crop-size 32 --batch-size 16 --fsync-off
run light-fsync light.pt light.h5 --crop-size 32 --batch-size 16
run light-segments light.pt light.h5 --crop-size 32 --batch-size 16 --fsync-off --segment-mb 128
run light-float16 light.pt light.h5 --crop-size 32 --batch-size 16 --fsync-off --dtype float16
echo "== heavy encoder (13 convs, 64/128 wide, 48x48 crops) =="
run heavy heavy.pt heavy.h5 --crop-size 48 --batch-size 16 --fsync-off --plain-write-mb 256
run bench-heavy bench_heavy.pt heavy.h5 --crop-size 48 --batch-size 16 --plain-write-mb 256
run bench-heavy-auto bench_heavy.pt heavy.h5 --crop-size 48 --plain-write-mb 256
echo "results: $WORK/*.json"
