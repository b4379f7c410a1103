#!/usr/bin/env bash
# Dense-head defaults against an ordinary eager PyTorch run (docs/train-probe.md, "Optimisation"). Segmentation on
# the demo data (Fashion-MNIST garments: 10 classes + background, 28x28 masks; level 1 of the
# demo CNN, 32x7x7), 8,000 train / 1,000 val / 2,000 test crops, a conv head, 20 epochs,
# lr 1e-3,3e-3,1e-2, each lr at its best val epoch and the best lr by val. Prints test mIoU for:
#   embcache --batch-size 256 (the default before "auto") and --batch-size auto (64 on dense tasks)
#   scripts/peers/dense_reference.py: BatchNorm, batch 64, Adam (the usual recipe) and GroupNorm,
#   batch 64, AdamW (embcache's head as eager PyTorch)
# Every run uses one thread, so two can share a 2-core machine; about 15 minutes there.
# Usage: scripts/bench_dense_defaults.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
[[ -n ${BUILD_DIR:-} && -x $BUILD/apps/embcache/embcache ]] || scripts/setup.sh >/dev/null
WORK=${1:-$(mktemp -d /tmp/embcache-bench-dense-XXXXXX)}
mkdir -p "$WORK"
PY=${PYTHON:-/usr/bin/python3}
E=$BUILD/apps/embcache/embcache
EPOCHS=${EPOCHS:-20}
LRS=1e-3,3e-3,1e-2

[[ -f $WORK/fashion_mnist_seg.h5 ]] || $PY scripts/data/make_demo_data.py "$WORK" --train 8000 --val 1000 --test 2000 >/dev/null
[[ -f $WORK/seg.h5 ]] || "$E" precompute --encoder "$WORK/demo_encoder.pt" --dataset "$WORK/fashion_mnist_seg.h5" \
  --out "$WORK/seg.h5" --scale 0.00392157 --mean 0.286 --std 0.353 --dtype float16 --quiet --no-fsync
probe() {  # probe NAME [options]
  local name=$1
  shift
  "$E" train-probe --cache "$WORK/seg.h5" --out "$WORK/$name" --task segmentation --head conv --levels 1 \
    --epochs "$EPOCHS" --lr "$LRS" --threads 1 --quiet "$@" >/dev/null
}
reference() {  # reference NAME [options]
  local name=$1
  shift
  OMP_NUM_THREADS=1 $PY scripts/peers/dense_reference.py "$WORK/seg.h5" --level 1 --epochs "$EPOCHS" --lr "$LRS" "$@" \
    >"$WORK/$name.json"
}
probe b256 --batch-size 256 &
reference ref-bn64 --batch 64 --norm batch --optimizer adam
wait
probe auto &
reference ref-gn64 --batch 64 --norm group --optimizer adamw
wait
$PY - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
def ours(name):
    m = json.load(open(f"{w}/{name}/metrics.json"))
    return m["best"]["lr"], m["best"]["epoch"], m["test"]["miou"], m["options"]["batch_size"]
def ref(name):
    b = json.load(open(f"{w}/{name}.json"))["best"]
    return b["lr"], b["best_epoch"], b["test_miou"]
rows = [("embcache conv, batch 256 (GroupNorm, AdamW, cosine)", *ours("b256")[:3]),
        (f"embcache conv, batch auto = {ours('auto')[3]} (GroupNorm, AdamW, cosine)", *ours("auto")[:3]),
        ("eager PyTorch conv, BatchNorm, batch 64, Adam, constant lr", *ref("ref-bn64")),
        ("eager PyTorch conv, GroupNorm, batch 64, AdamW, constant lr", *ref("ref-gn64"))]
print(f"{'run':62} {'best lr':>8} {'epoch':>6} {'test mIoU':>10}")
for name, lr, epoch, miou in rows:
    print(f"{name:62} {lr:>8g} {epoch:>6} {miou:>10.4f}")
gap = ours("auto")[2] - ref("ref-bn64")[2]
print(f"auto vs the BatchNorm reference: {gap * 100:+.1f} points (target: within 1 point or better)")
PY
