#!/usr/bin/env bash
# Installs dependencies, builds, makes a demo dataset (Fashion-MNIST from Debian) and encoder,
# runs precompute twice (the second run finds everything cached), inspects the cache, reads it
# back with h5py, trains a grid of linear probes on it, and runs the quickstart study
# (configs/quickstart.json) which ends with an HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
OUT=demo-out  # configs/*.json read the demo data from here
# Each demo starts from nothing, so a demo-out/ left by an older version (whose encoder or cache
# layout may differ) cannot make it fail.
rm -rf "$OUT"
mkdir -p "$OUT"
EMBCACHE=build/apps/embcache/embcache

/usr/bin/python3 scripts/data/make_demo_data.py "$OUT"
echo
echo "== precompute: every level of every image, float16, crash-safe and incremental =="
$EMBCACHE precompute --encoder "$OUT/demo_encoder.pt" --dataset "$OUT/fashion_mnist.h5" \
  --out "$OUT/cache.h5" --scale 0.00392157 --mean 0.286 --std 0.353 --dtype float16 \
  --summary-json "$OUT/summary.json"
echo
echo "== the same command again: nothing to compute =="
$EMBCACHE precompute --encoder "$OUT/demo_encoder.pt" --dataset "$OUT/fashion_mnist.h5" \
  --out "$OUT/cache.h5" --scale 0.00392157 --mean 0.286 --std 0.353 --dtype float16
echo
echo "== inspect =="
$EMBCACHE inspect "$OUT/cache.h5"
echo
echo "== read with h5py alone =="
/usr/bin/python3 - "$OUT/cache.h5" <<'PY'
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "r") as f:
    split = f["index/split"].asstr()[:]
    train = np.flatnonzero(split == "train")
    feats = f["levels/2"][:]            # [N, 32] pooled vector level, float16
    labels = f["labels/class"][:]
    print(f"levels/2: {feats.shape} {feats.dtype}; first key: {f['index/group'].asstr()[0]}/"
          f"{f['index/window'].asstr()[0]} {f['index/bounds'][0].tolist()}")
    # A nearest-class-mean probe in numpy, to show the features carry signal.
    x = feats.astype(np.float32)
    means = np.stack([x[train][labels[train] == c].mean(0) for c in range(10)])
    test = np.flatnonzero(split == "test")
    pred = np.argmin(((x[test][:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    print(f"nearest-class-mean accuracy on {len(test)} test images from cached features: "
          f"{(pred == labels[test]).mean():.3f} (10 classes, random-weight encoder)")
PY
echo
echo "== train-probe: 2 levels x 3 learning rates x 2 weight decays of linear heads, one pass per epoch =="
$EMBCACHE train-probe --cache "$OUT/cache.h5" --out "$OUT/probe" --task classification --head linear \
  --levels 0,1 --lr 1e-3,1e-2,3e-2 --weight-decay 0,0.05 --epochs 30 --bootstrap 200 --quiet
/usr/bin/python3 - "$OUT/probe/metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print(f"{'combination':<36} {'best epoch':>10} {'val acc':>8} {'test acc':>8}")
for c in sorted(m["combinations"], key=lambda c: -c["val"]["accuracy"]):
    print(f"{c['combination']:<36} {c['best_epoch']:>10} {c['val']['accuracy']:>8.3f} {c['test']['accuracy']:>8.3f}")
t, ci = m["test"], m["test_ci95"]
print(f"best: {m['best']['combination']}: test accuracy {t['accuracy']:.3f} "
      f"(95% CI {ci['accuracy'][0]:.3f}-{ci['accuracy'][1]:.3f}), macro-F1 {t['macro_f1']:.3f}, "
      f"top-5 {t['top5_accuracy']:.3f}; {m['timing']['samples_per_second']:.0f} samples/s ({m['data']['tier']} tier)")
PY
echo
echo "== embcache run configs/quickstart.json: a study from JSON (precompute + probe grid + report) =="
$EMBCACHE run configs/quickstart.json
echo
echo "demo outputs are in $OUT/ (cache.h5, summary.json, probe/metrics.json, probe/history.csv, probe/head.pt)"
echo "study results: $OUT/study-quickstart/results.csv; open $OUT/study-quickstart/report.html in a browser"
