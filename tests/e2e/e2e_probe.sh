#!/usr/bin/env bash
# train-probe end to end: a linear probe on real data (Fashion-MNIST) agrees with an independent
# L-BFGS logistic regression; head.pt reproduces the reported test metric in Python; a grid
# member equals the same head trained alone; runs are deterministic; segmentation heads reach a
# high mIoU; the stream tier trains within a small budget; bad input gets one clear line.
source "$(dirname "$0")/lib.sh"
: "${PROBE_PY:?run through ctest}" "${DEMO_DATA_PY:?}"
probe() { "$PYTHON" "$PROBE_PY" "$@"; }

"$PYTHON" "$DEMO_DATA_PY" . --train 3000 --val 500 --test 2000 >/dev/null
"$EMBCACHE" precompute --encoder demo_encoder.pt --dataset fashion_mnist.h5 --out fm.h5 --quiet --no-fsync \
  --scale 0.00392157 --mean 0.286 --std 0.353 --dtype float16

# --drop-behind (more than one 32 MiB writeback range here) changes where pages live, not the cache.
"$EMBCACHE" precompute --encoder demo_encoder.pt --dataset fashion_mnist.h5 --out fm-drop.h5 --quiet --drop-behind \
  --scale 0.00392157 --mean 0.286 --std 0.353 --dtype float16
fx same fm.h5 fm-drop.h5

# Linear probe vs L-BFGS logistic regression on the same pooled, standardised features.
"$EMBCACHE" train-probe --cache fm.h5 --out lin --task classification --head linear --levels 1 \
  --lr 3e-3,1e-2,3e-2 --epochs 60 --quiet --bootstrap 200 >lin.txt
grep -qE "^train-probe: best linear levels=1 lr=[0-9.e-]+ wd=0 \(epoch [0-9]+\): val accuracy 0\.[0-9]{4}, test accuracy 0\.[0-9]{4}; 3 heads" lin.txt ||
  fail "summary line: $(cat lin.txt)"
ours=$("$PYTHON" -c 'import json; print(json.load(open("lin/metrics.json"))["test"]["accuracy"])')
ref=$(probe lbfgs fm.h5 1)
"$PYTHON" - "$ours" "$ref" <<'PY' || fail "linear probe and L-BFGS disagree"
import sys
ours, ref = map(float, sys.argv[1:])
print(f"linear probe test accuracy {ours:.4f}, L-BFGS logistic regression {ref:.4f}")
sys.exit(0 if abs(ours - ref) <= 0.01 else 1)
PY
probe head fm.h5 lin
"$PYTHON" - <<'PY' || fail "metrics.json lacks required fields"
import json
m = json.load(open("lin/metrics.json"))
for k in ["accuracy", "top5_accuracy", "macro_f1", "per_class_recall", "confusion_matrix"]:
    assert k in m["test"], k
lo, hi = m["test_ci95"]["accuracy"]
assert lo <= m["test"]["accuracy"] <= hi and hi - lo < 0.1, (lo, hi)
assert len(m["combinations"]) == 3 and m["data"]["tier"] == "host"
assert m["timing"]["samples_per_second"] > 0 and len(m["history"]) == 180
print("metrics.json: test metrics, confidence interval, grid and timing present")
PY
[[ $(wc -l <lin/history.csv) -eq 181 ]] || fail "history.csv should have a header and 180 rows"

# A grid member equals the head trained alone; same seed, same results run to run.
"$EMBCACHE" train-probe --cache fm.h5 --out solo --task classification --head linear,mlp --levels 1 --lr 1e-2 --epochs 5 --quiet
"$EMBCACHE" train-probe --cache fm.h5 --out grid --task classification --head linear,mlp --levels 0,1 \
  --lr 1e-3,1e-2 --weight-decay 0,1e-4 --epochs 5 --quiet
probe same solo grid "linear levels=1 lr=0.01 wd=0"
probe same solo grid "mlp levels=1 lr=0.01 wd=0"
"$EMBCACHE" train-probe --cache fm.h5 --out grid2 --task classification --head linear,mlp --levels 0,1 \
  --lr 1e-3,1e-2 --weight-decay 0,1e-4 --epochs 5 --quiet
probe same grid grid2

# Stream tier with a budget far below the cache: trains as well as the host tier (only the
# shuffle order differs) and reports its statistics.
for tier in host stream; do
  "$EMBCACHE" train-probe --cache fm.h5 --out $tier --task classification --levels 0 --head conv --hidden 32 \
    --conv-blocks 1 --tier $tier --host-memory-budget $([[ $tier == host ]] && echo 1G || echo 16M) --epochs 3 --lr 1e-2 --quiet
done
"$PYTHON" - <<'PY' || fail "stream tier"
import json
h, s = (json.load(open(f"{t}/metrics.json")) for t in ("host", "stream"))
d = s["data"]
# Val (500 rows of 16x14x14 float16) fits a third of the budget: held in memory, read once.
assert d["tier"] == "stream" and d["val_tier"] == "host" and d["bytes_resident"] == 500 * 16 * 14 * 14 * 2, d
assert 0 < d["block_row_utilization"] <= 1, d
assert h["data"]["tier"] == "host" and h["data"]["val_tier"] == "host", h["data"]
a, b = h["test"]["accuracy"], s["test"]["accuracy"]
print(f"test accuracy: host tier {a:.3f}, stream tier {b:.3f} (read {d['bytes_read']/1e6:.0f} MB)")
assert abs(a - b) <= 0.03 and b > 0.3
PY
# A budget whose third cannot hold val: val streams too, and the run still trains.
"$EMBCACHE" train-probe --cache fm.h5 --out stream-val --task classification --levels 0 --head conv --hidden 32 \
  --conv-blocks 1 --tier stream --host-memory-budget 9M --batch-size 128 --epochs 1 --lr 1e-2 --quiet
"$PYTHON" -c 'import json; d = json.load(open("stream-val/metrics.json"))["data"]; assert d["val_tier"] == "stream" and d["bytes_resident"] == 0, d' ||
  fail "val streamed under a small budget"

# Segmentation: conv, fpn and upernet reach a high mIoU on shapes with known masks; head.pt agrees,
# and upernet's head.pt equals an nn.Module UPerHead given its parameters.
probe segdata seg.h5 --n 600
"$EMBCACHE" precompute --encoder demo_encoder.pt --dataset seg.h5 --out seg_cache.h5 --levels 0,1 --quiet --no-fsync \
  --scale 0.00392157 --mean 0.5 --std 0.25
for head in conv fpn upernet; do
  levels=0; [[ $head != conv ]] && levels=0+1
  "$EMBCACHE" train-probe --cache seg_cache.h5 --out seg-$head --task segmentation --head $head --levels $levels \
    --lr 3e-3 --epochs 15 --batch-size 32 --hidden 32 --quiet
  "$PYTHON" - seg-$head <<'PY' || fail "segmentation mIoU too low"
import json, sys
m = json.load(open(sys.argv[1] + "/metrics.json"))
print(f"{sys.argv[1]}: test mIoU {m['test']['miou']:.3f}, pixel accuracy {m['test']['pixel_accuracy']:.3f}")
sys.exit(0 if m["test"]["miou"] >= 0.85 else 1)
PY
done
probe head seg_cache.h5 seg-fpn
probe head seg_cache.h5 seg-upernet
probe upernet seg_cache.h5 seg-upernet || fail "upernet is not mmsegmentation's UPerHead"
# One level: the pyramid pooling module alone; pixel regression too.
"$EMBCACHE" train-probe --cache seg_cache.h5 --out seg-upernet1 --task segmentation --head upernet --levels 1 --tier stream \
  --epochs 1 --batch-size 64 --hidden 16 --quiet
probe upernet seg_cache.h5 seg-upernet1 || fail "upernet on one level"
"$EMBCACHE" train-probe --cache seg_cache.h5 --out pixreg-upernet --task pixel-regression --head upernet --levels 0+1 \
  --epochs 1 --batch-size 64 --hidden 16 --quiet
"$EMBCACHE" train-probe --cache seg_cache.h5 --out seg-more --task segmentation --head linear,pixel-shuffle --levels 0 \
  --lr 1e-2 --epochs 2 --batch-size 64 --quiet
"$EMBCACHE" train-probe --cache seg_cache.h5 --out seg-unet --task segmentation --head unet --levels 0+1 \
  --epochs 1 --batch-size 64 --hidden 16 --quiet
"$EMBCACHE" train-probe --cache seg_cache.h5 --out pixreg --task pixel-regression --head linear --levels 0 \
  --epochs 2 --quiet

# logreg: full-batch L-BFGS along a C grid equals scikit-learn's LogisticRegression(lbfgs) on the
# same pooled, standardised features (test accuracy within 0.2 points at every C); head.pt is a
# linear head that reproduces the reported metric.
"$EMBCACHE" train-probe --cache fm.h5 --out logreg --task classification --head logreg --levels 1,1+2 \
  --C 1e-3,1e-2,0.1,1,10,100 --quiet >logreg.txt
grep -qE "^train-probe: best logreg levels=[0-9+]+ C=[0-9.e-]+ \(epoch 1\): val accuracy 0\.[0-9]{4}, test accuracy" logreg.txt ||
  fail "logreg summary: $(cat logreg.txt)"
probe head fm.h5 logreg
"$EMBCACHE" train-probe --cache fm.h5 --out logreg1 --task classification --head logreg --levels 1 \
  --C 1e-3,1e-2,0.1,1,10,100 --quiet >/dev/null
probe sklearn-logreg fm.h5 logreg1 || fail "logreg differs from scikit-learn"
"$EMBCACHE" train-probe --cache fm.h5 --out logreg-default --task classification --head logreg --levels 2 --quiet >/dev/null
"$PYTHON" -c 'import json, sys; c = [r["C"] for r in json.load(open("logreg-default/metrics.json"))["combinations"]]; assert len(c) == 11 and c[0] == 1e-6 and c[-1] == 1e4, c' ||
  fail "the default C grid"
expect_error 2 "--head: logreg is fitted by L-BFGS, not trained by epochs; give it alone" "$EMBCACHE" train-probe \
  --cache fm.h5 --out bad --task classification --head linear,logreg --levels 1
expect_error 2 "--C: applies to --head logreg only" "$EMBCACHE" train-probe --cache fm.h5 --out bad \
  --task classification --head linear --levels 1 --C 1
expect_error 2 "--C: values must be positive" "$EMBCACHE" train-probe --cache fm.h5 --out bad \
  --task classification --head logreg --levels 1 --C 0,1
expect_error 2 "--head: logreg is multinomial logistic regression; use it with --task classification" "$EMBCACHE" \
  train-probe --cache seg_cache.h5 --out bad --task segmentation --head logreg --levels 0

# knn: one top-k pass for every k equals DINO's k-NN written in plain torch; the stream tier
# (train rows in smaller blocks) gives the host tier's numbers; head.pt holds the train bank.
"$EMBCACHE" train-probe --cache fm.h5 --out knn --task classification --head knn --levels 1 --k 1,10,20,50 --quiet >/dev/null
probe knn fm.h5 knn || fail "knn differs from the reference"
probe head fm.h5 knn
"$EMBCACHE" train-probe --cache fm.h5 --out knn-stream --task classification --head knn --levels 1 --k 1,10,20,50 \
  --tier stream --host-memory-budget 2M --quiet >/dev/null 2>knn-stream.err
grep -q "no head.pt: a k-NN head holds the train split" knn-stream.err || fail "knn stream: $(cat knn-stream.err)"
[[ ! -e knn-stream/head.pt ]] || fail "a streamed knn wrote a head"
# Blocks of other sizes round the similarities differently, which can flip a near-tie: within 2 rows.
"$PYTHON" -c 'import json, sys; a, b = ([c["test"]["accuracy"] for c in json.load(open(p + "/metrics.json"))["combinations"]] for p in sys.argv[1:]); sys.exit(0 if max(abs(x - y) for x, y in zip(a, b)) <= 0.001 else 1)' \
  knn knn-stream || fail "knn: the stream tier differs from the host tier"
expect_error 2 "--k: 5000 is larger than the train split ('train', 3000 rows)" "$EMBCACHE" train-probe --cache fm.h5 \
  --out bad --task classification --head knn --levels 1 --k 20,5000
expect_error 2 "--head: knn votes for a class; use it with --task classification" "$EMBCACHE" train-probe \
  --cache seg_cache.h5 --out bad --task segmentation --head knn --levels 0
expect_error 2 "--k: applies to --head knn only" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification \
  --levels 1 --k 5

# Class weights on an imbalanced train split (classes 5-9 keep 4% of their rows; val and test
# stay balanced): the weights are scikit-learn's "balanced" of the train labels, and they lift
# macro F1.
"$PYTHON" - <<'PY'
import h5py, numpy as np
with h5py.File("fashion_mnist.h5") as s, h5py.File("imbalanced.h5", "w") as d:
    y, split = s["labels"][:], s["splits"].asstr()[:]
    rng = np.random.default_rng(0)
    keep = ~((split == "train") & (y >= 5) & (rng.random(len(y)) > 0.04))
    for k in ("images", "labels"):
        d[k] = s[k][:][keep]
    for k in ("names", "splits"):
        d.create_dataset(k, data=s[k].asstr()[:][keep].tolist(), dtype=h5py.string_dtype())
PY
"$EMBCACHE" precompute --encoder demo_encoder.pt --dataset imbalanced.h5 --out imbalanced.h5.cache --levels 1 --quiet \
  --no-fsync --scale 0.00392157 --mean 0.286 --std 0.353
for cw in none balanced inverse-sqrt; do
  "$EMBCACHE" train-probe --cache imbalanced.h5.cache --out cw-$cw --task classification --levels 1 --lr 1e-2 \
    --epochs 30 --class-weights $cw --quiet >/dev/null
done
"$PYTHON" - <<'PY' || fail "class weights"
import h5py, json, numpy as np
with h5py.File("imbalanced.h5.cache") as f:
    y = f["labels/class"][:][f["index/split"].asstr()[:] == "train"]
counts = np.bincount(y, minlength=10)
m = {cw: json.load(open(f"cw-{cw}/metrics.json")) for cw in ("none", "balanced", "inverse-sqrt")}
assert "class_weights" not in m["none"]
got = m["balanced"]["class_weights"]
assert got["mode"] == "balanced" and got["train_counts"] == counts.tolist(), got
want = len(y) / (10 * counts)  # scikit-learn's compute_class_weight("balanced")
assert np.allclose(got["weights"], want, rtol=1e-6), (got["weights"], want)
s = np.array(m["inverse-sqrt"]["class_weights"]["weights"])
assert np.isclose((s * counts).sum(), len(y)) and np.isclose(s[0] / s[5], np.sqrt(counts[5] / counts[0]))
f1 = {cw: m[cw]["test"]["macro_f1"] for cw in m}
print("macro F1 on a balanced test split, train classes 5-9 at 4%: " + ", ".join(f"{k} {v:.3f}" for k, v in f1.items()))
assert f1["balanced"] > f1["none"] + 0.05 and f1["inverse-sqrt"] > f1["none"], f1
PY
expect_error 2 "--class-weights: applies to classification, multilabel and segmentation" "$EMBCACHE" train-probe \
  --cache fm.h5 --out bad --task regression --levels 1 --class-weights balanced

# Multilabel and regression on labels the features can explain.
for kind in multilabel regression; do
  probe labeldata $kind.h5 $kind
  "$EMBCACHE" precompute --encoder demo_encoder.pt --dataset $kind.h5 --out $kind-cache.h5 --quiet --no-fsync \
    --scale 0.00392157 --mean 0.5 --std 0.25
  "$EMBCACHE" train-probe --cache $kind-cache.h5 --out $kind --task $kind --head linear,mlp --levels 1 \
    --lr 1e-2 --epochs 30 --batch-size 64 --quiet
done
"$PYTHON" - <<'PY' || fail "multilabel/regression probes"
import json
m = json.load(open("multilabel/metrics.json"))["test"]
r = json.load(open("regression/metrics.json"))["test"]
print(f"multilabel: mAP {m['map']:.3f}, micro-F1 {m['micro_f1']:.3f}; regression: R2 {r['r2']:.3f}, RMSE {r['rmse']:.3f}")
assert m["map"] > 0.9 and m["micro_f1"] > 0.8, m
assert r["r2"] > 0.8 and r["rmse"] < 0.5, r
PY

# No val split: --val-fraction carves one from train, by window, the same way every time.
expect_error 3 "no rows in split 'carved'" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --val-split carved
for i in 1 2; do
  "$EMBCACHE" train-probe --cache fm.h5 --out carve$i --task classification --levels 1 --val-split carved \
    --val-fraction 0.2 --epochs 2 --quiet
done
probe same carve1 carve2
"$PYTHON" - <<'PY' || fail "--val-fraction"
import json
s = json.load(open("carve1/metrics.json"))["splits"]
assert s["train"]["rows"] + s["val"]["rows"] == 3000 and 450 <= s["val"]["rows"] <= 750, s
print(f"--val-fraction 0.2: {s['val']['rows']} of 3000 train rows carved into val")
PY

# Ctrl-C: exit 130, nothing written.
"$EMBCACHE" train-probe --cache fm.h5 --out interrupted --task classification --head conv --levels 0 --epochs 50 --quiet &
pid=$!
# A background job of a script starts with SIGINT ignored: a signal sent before train-probe has
# installed its handler would be lost (a slow start, as under ASan on a busy machine, ran all 50
# epochs). Wait until the handler is there (SigCgt bit 2), then give it a moment to train.
for _ in $(seq 600); do
  mask=$(awk '/^SigCgt/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  (( (16#${mask:-0} & 2) != 0 )) && break
  sleep 0.1
done
sleep 1
kill -INT $pid
rc=0
wait $pid || rc=$?
[[ $rc -eq 130 ]] || fail "Ctrl-C: expected exit 130, got $rc"
[[ ! -e interrupted ]] || fail "an interrupted run left a run directory"
echo "ok: Ctrl-C stops training with exit 130 and writes nothing"

# Bad input: one line each, non-zero exit, nothing written.
expect_error 3 "no masks" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task segmentation --levels 0
expect_error 3 "no class labels" "$EMBCACHE" train-probe --cache seg_cache.h5 --out bad --task classification --levels 0
expect_error 2 "level '7' is not in" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 7
expect_error 3 "no rows in split 'holdout'" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --val-split holdout
expect_error 3 "no rows in split 'holdout'" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --test-split holdout
expect_error 2 "'train' is also the --train-split" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --val-split train
expect_error 2 "never reach --lr" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --epochs 2 --warmup-epochs 2
expect_error 2 "--val-fraction: expected a fraction in \\[0, 1), got 1.5$" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --val-fraction 1.5
# The options are checked before any cache is opened: no cache file is needed to hear of them.
expect_error 2 "--val-fraction: expected a fraction in \\[0, 1), got -0.1$" "$EMBCACHE" train-probe --cache absent.h5 --out bad --task classification --levels 1 --val-fraction -0.1
expect_error 2 "'val' is also the --train-split" "$EMBCACHE" train-probe --cache absent.h5 --out bad --task classification --levels 1 --train-split val
expect_error 2 "streaming needs about .* raise the budget to [0-9.]* MiB (the features then stay in memory)" \
  "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --head conv --levels 0 --batch-size 2048 --host-memory-budget 20M
expect_error 2 "--lr: 0.001 is listed twice" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --lr 1e-3,0.01,0.001
expect_error 2 "--levels: level 1 is listed twice in 1+1" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1+1
expect_error 2 "--head: mlp is listed twice" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --head mlp,linear,mlp
expect_error 2 "--test-split: 'val' is also the --val-split" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --test-split val
expect_error 3 "outside \[0, 5)" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 1 --num-classes 5
"$EMBCACHE" precompute --encoder demo_encoder.pt --dataset fashion_mnist.h5 --out fm32.h5 --quiet --no-fsync
expect_error 3 "signature differs" "$EMBCACHE" train-probe --cache fm.h5 --cache fm32.h5 --out bad --task classification --levels 1
# Several caches of one encoder: their rows add up; a crop in two of them is refused.
"$PYTHON" - <<'PY'
import h5py
with h5py.File("fashion_mnist.h5") as f:
    for name, rows in (("half1.h5", slice(0, None, 2)), ("half2.h5", slice(1, None, 2))):
        with h5py.File(name, "w") as g:
            for key in f:
                data = f[key][rows]
                g.create_dataset(key, data=data, dtype=f[key].dtype)
PY
for half in half1 half2; do
  "$EMBCACHE" precompute --encoder demo_encoder.pt --dataset $half.h5 --out $half-cache.h5 --quiet --no-fsync \
    --scale 0.00392157 --mean 0.286 --std 0.353 --dtype float16
done
"$EMBCACHE" train-probe --cache half1-cache.h5 --cache half2-cache.h5 --out halves --task classification --levels 1 \
  --epochs 1 --quiet
"$PYTHON" -c "
import json; s = json.load(open('halves/metrics.json'))['splits']
assert (s['train']['rows'], s['val']['rows'], s['test']['rows']) == (3000, 500, 2000), s"
expect_error 3 "the crop default/.* is also in half1-cache.h5; caches trained on together must hold different crops" \
  "$EMBCACHE" train-probe --cache half1-cache.h5 --cache half2-cache.h5 --cache half1-cache.h5 --out bad --task classification --levels 1
expect_error 2 "exhausted" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 0 --host-memory-budget 64K
expect_error 2 "host-memory-budget" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --levels 0 --tier host --host-memory-budget 64K
expect_error 3 "loss of linear levels=1 lr=1e+38 wd=0 is not finite in epoch 1" "$EMBCACHE" train-probe --cache fm.h5 --out bad \
  --task classification --levels 1 --optimizer sgd --lr 1e38 --schedule constant
# In a grid, a diverging combination stops alone and the others finish.
"$EMBCACHE" train-probe --cache fm.h5 --out sweep-div --task classification --levels 1 --optimizer sgd --lr 1e38,0.01 \
  --schedule constant --epochs 3 --quiet >/dev/null 2>div.err || fail "one diverging lr failed the grid: $(cat div.err)"
[[ $(wc -l <div.err) -eq 1 ]] && grep -q "^embcache: warning: training diverged: the loss of linear levels=1 lr=1e+38 wd=0" div.err ||
  fail "divergence warning: $(cat div.err)"
"$PYTHON" - <<'PY' || fail "metrics of a grid with a diverged combination"
import json
m = json.load(open("sweep-div/metrics.json"))
assert m["best"]["lr"] == 0.01 and m["test"]["accuracy"] > 0.3, m["best"]
bad = [c for c in m["combinations"] if c["lr"] == 1e38][0]
assert bad["diverged_epoch"] == 1 and bad["val"] == {} and bad["test"] == {}, bad
assert any("diverged" in w for w in m["warnings"]), m.get("warnings")
PY
expect_error 2 "upernet predicts per pixel; use it with --task segmentation or pixel-regression" "$EMBCACHE" train-probe \
  --cache fm.h5 --out bad --task classification --head upernet --levels 1
expect_error 2 "fpn combines several levels" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --head fpn --levels 1
expect_error 2 "level 2 is a vector" "$EMBCACHE" train-probe --cache fm.h5 --out bad --task classification --head conv --levels 2
sha_before=$(sha256sum fm.h5)
expect_error 2 "--out: .*fm.h5 is a file; name a directory" "$EMBCACHE" train-probe --cache fm.h5 --out fm.h5 --task classification --levels 1
[[ $(sha256sum fm.h5) == "$sha_before" ]] || fail "--out naming the cache changed the cache"
expect_error 3 "fashion_mnist.h5x: no such file" "$EMBCACHE" train-probe --cache fashion_mnist.h5x --out bad --task classification --levels 1
[[ ! -e bad ]] || fail "a failed run left a run directory"
echo "e2e_probe: all checks passed"
