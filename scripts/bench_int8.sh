#!/usr/bin/env bash
# int8 storage benchmark (docs/performance.md, "The output side"). Real data: Fashion-MNIST through the demo encoder, whose
# level 1 is a 32 x 7 x 7 map (49 positions per channel). For each storage dtype it prints the
# level's stored bytes (int8: with its scales) and the ratio to float32, the whole file, the
# precompute rate, and a linear probe's test accuracy on level 1 over TEST rows, trained with
# full batches (logistic regression is convex, so the runs compare features, not minibatch order).
# Targets: int8 bytes <= 0.30 x float32, int8 accuracy within 0.3 points of float32.
# Usage: scripts/bench_int8.sh [WORK_DIR]; TRAIN, TEST (defaults 3000, 2000; Fashion-MNIST has
# 60000 and 10000); BUILD_DIR and PYTHON as in the other benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
[[ -n ${BUILD_DIR:-} && -x $BUILD/apps/embcache/embcache ]] || scripts/setup.sh >/dev/null
WORK=${1:-$(mktemp -d /tmp/embcache-bench-int8-XXXXXX)}
mkdir -p "$WORK"
PY=${PYTHON:-/usr/bin/python3}
E=$(realpath "$BUILD/apps/embcache/embcache")
TRAIN=${TRAIN:-3000}
TEST=${TEST:-2000}
$PY scripts/data/make_demo_data.py "$WORK" --train "$TRAIN" --val 500 --test "$TEST" >/dev/null
cd "$WORK"
printf "%-9s %14s %8s %12s %11s %9s %8s\n" dtype "level 1 bytes" ratio "file bytes" "crops/s" "test acc" points
f32_bytes="" f32_acc=""
for dtype in float32 float16 bfloat16 int8; do
  "$E" precompute --encoder demo_encoder.pt --dataset fashion_mnist.h5 --out $dtype.h5 --overwrite --quiet --no-fsync \
    --scale 0.00392157 --mean 0.286 --std 0.353 --dtype $dtype --summary-json $dtype.summary.json >/dev/null
  "$E" inspect $dtype.h5 --json >$dtype.json
  "$E" train-probe --cache $dtype.h5 --out probe-$dtype --task classification --head linear --levels 1 --lr 0.05 \
    --epochs 300 --batch-size "$TRAIN" --quiet >/dev/null
  read -r bytes file rate acc < <($PY - $dtype <<'PY'
import json, sys
d = sys.argv[1]
j, s = json.load(open(f"{d}.json")), json.load(open(f"{d}.summary.json"))
level = next(l for l in j["levels"] if l["name"] == "1")
acc = json.load(open(f"probe-{d}/metrics.json"))["test"]["accuracy"]
print(level["bytes"], j["file_bytes"], round(s["crops_per_second"]), acc)
PY
  )
  [[ -z $f32_bytes ]] && f32_bytes=$bytes f32_acc=$acc
  $PY -c 'import sys; d, b, fb, f, r, a, fa = sys.argv[1:]; print("%-9s %14s %8.3f %12s %11s %9.4f %+8.2f" % (d, b, int(b) / int(fb), f, r, float(a), 100 * (float(a) - float(fa))))' \
    $dtype "$bytes" "$f32_bytes" "$file" "$rate" "$acc" "$f32_acc"
done
echo "test rows: $TEST; targets: int8 ratio <= 0.30, |points| <= 0.3"
