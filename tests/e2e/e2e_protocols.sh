#!/usr/bin/env bash
# The protocols the field reports, end to end: --seeds (each seed exactly a lone run with that
# --seed; summaries over seeds; the best by its mean), --seed-mode init, --train-fraction (nested
# whole-window subsets, each exactly a lone run with that fraction), and both in a study (one
# pass, a run per seed and fraction, results_over_seeds.csv, the report's figures).
source "$(dirname "$0")/lib.sh"
: "${DEMO_DATA_PY:?run through ctest}"

"$PYTHON" "$DEMO_DATA_PY" . --train 3000 --val 500 --test 2000 >/dev/null
"$EMBCACHE" precompute --encoder demo_encoder.pt --dataset fashion_mnist.h5 --out fm.h5 --quiet --no-fsync \
  --scale 0.00392157 --mean 0.286 --std 0.353 --dtype float16
grid=(--cache fm.h5 --task classification --head linear,mlp --levels 1 --lr 3e-3,1e-2 --epochs 4 --quiet)

# 1. Seeds: each (combination, seed) equals the lone run with that --seed, to the last digit.
"$EMBCACHE" train-probe "${grid[@]}" --out seeds --seeds 0,1,2 >seeds.txt
grep -qE "over 3 seeds val accuracy 0\.[0-9]{4} \+- 0\.[0-9]{4}, test 0\.[0-9]{4} \+- 0\.[0-9]{4}" seeds.txt ||
  fail "summary line over seeds: $(cat seeds.txt)"
for s in 1 2; do "$EMBCACHE" train-probe "${grid[@]}" --out lone$s --seed $s >/dev/null; done
"$PYTHON" - <<'PY' || fail "seeds"
import json, statistics
m = json.load(open("seeds/metrics.json"))
by_id = {c["combination"]: c for c in m["combinations"]}
assert len(by_id) == 12, list(by_id)
for s in (1, 2):
    for c in json.load(open(f"lone{s}/metrics.json"))["combinations"]:
        mine = by_id[c["combination"] + f" seed={s}"]
        assert mine["seed"] == s and mine["best_epoch"] == c["best_epoch"], (mine, c)
        assert mine["val"] == c["val"] and mine["test"] == c["test"], c["combination"]
# The summaries, recomputed: mean, sample std, IQM (n = 3: the mean); the best has the best mean.
means = {}
for row in m["over_seeds"]:
    runs = [by_id[row["combination"] + f" seed={s}"] for s in (0, 1, 2)]
    val = [r["val"]["accuracy"] for r in runs]
    test = [r["test"]["accuracy"] for r in runs]
    v, t = row["val"]["accuracy"], row["test"]["accuracy"]
    assert row["seeds"] == [0, 1, 2] and v["n"] == 3, row
    assert abs(v["mean"] - statistics.mean(val)) < 1e-12 and abs(v["std"] - statistics.stdev(val)) < 1e-12, (v, val)
    assert abs(t["iqm"] - statistics.mean(test)) < 1e-12 and min(test) <= t["ci95"][0] <= t["ci95"][1] <= max(test), (t, test)
    means[row["combination"]] = v["mean"]
best = max(means, key=means.get)
assert m["best"]["combination"] == best + " seed=0", (m["best"]["combination"], means)
assert m["best"]["over_seeds"]["val"]["accuracy"]["mean"] == means[best]
print(f"ok: 12 (combination, seed) results equal lone runs; the best by mean val is {best}")
PY

# 2. --seed-mode init: one pass and one bank for all seeds. Seed 0 (the pass's order) is still
#    the lone run; the other seeds share its batch order and dropout, so they differ from theirs.
"$EMBCACHE" train-probe "${grid[@]}" --out init --seeds 0,1,2 --seed-mode init >/dev/null
"$PYTHON" - <<'PY' || fail "seed-mode init"
import json
full, init = json.load(open("seeds/metrics.json")), json.load(open("init/metrics.json"))
f = {c["combination"]: c for c in full["combinations"]}
i = {c["combination"]: c for c in init["combinations"]}
assert f.keys() == i.keys()
for k in f:
    if k.endswith("seed=0"):
        assert f[k]["val"] == i[k]["val"] and f[k]["test"] == i[k]["test"], k
assert any(f[k]["val"] != i[k]["val"] for k in f if not k.endswith("seed=0"))
assert full["timing"]["banks"] == 6 and init["timing"]["banks"] == 2, (full["timing"], init["timing"])
print(f"ok: init mode trains {init['timing']['banks']} banks in {init['timing']['train_seconds']:.2f} s "
      f"(full: {full['timing']['banks']} in {full['timing']['train_seconds']:.2f} s); seed 0 is the lone run")
PY

# 3. Fractions: nested row counts, each equal to the lone run with that fraction; class weights
#    from the fraction's rows; the stream tier reads only the fraction's rows.
frac=(--cache fm.h5 --task classification --head linear --levels 1 --lr 1e-2 --epochs 4 --quiet --class-weights balanced)
"$EMBCACHE" train-probe "${frac[@]}" --out fractions --train-fraction 0.05,0.2,1 >/dev/null
"$EMBCACHE" train-probe "${frac[@]}" --out f20 --train-fraction 0.2 >/dev/null
"$EMBCACHE" train-probe "${frac[@]}" --out f20s --train-fraction 0.2 --tier stream --host-memory-budget 1M >/dev/null
"$PYTHON" - <<'PY' || fail "train fractions"
import json
m = json.load(open("fractions/metrics.json"))
rows = {c["train_fraction"]: c["train_rows"] for c in m["combinations"]}
assert rows[1] == 3000 and 140 <= rows[0.05] <= 160 and 590 <= rows[0.2] <= 610, rows
lone = json.load(open("f20/metrics.json"))["combinations"][0]
mine = [c for c in m["combinations"] if c["train_fraction"] == 0.2][0]
assert mine["val"] == lone["val"] and mine["test"] == lone["test"] and mine["train_rows"] == lone["train_rows"]
cw = {w["train_fraction"]: w for w in m["class_weights"]}
assert sum(cw[0.2]["train_counts"]) == rows[0.2] and all(n > 0 for n in cw[0.05]["train_counts"]), cw
s = json.load(open("f20s/metrics.json"))
assert s["data"]["tier"] == "stream" and s["combinations"][0]["train_rows"] == rows[0.2]
print(f"ok: fractions train on {rows[0.05]}, {rows[0.2]} and {rows[1]} rows; 0.2 in a grid equals it alone")
PY
# Nested and stratified: a k-NN head.pt holds its train rows, so the 5% rows must be inside the
# 20% rows, and each class near its share.
knn=(--cache fm.h5 --task classification --head knn --levels 1 --k 1 --quiet)
"$EMBCACHE" train-probe "${knn[@]}" --out k5 --train-fraction 0.05 >/dev/null
"$EMBCACHE" train-probe "${knn[@]}" --out k20 --train-fraction 0.2 >/dev/null
"$EMBCACHE" train-probe "${knn[@]}" --out k100 >/dev/null
"$PYTHON" - <<'PY' || fail "nested, stratified fractions"
import torch
def rows(d):
    m = torch.jit.load(d + "/head.pt")
    return {tuple(r) for r in m.bank.tolist()}, m.labels
small, big, every = rows("k5"), rows("k20"), rows("k100")
assert small[0] < big[0] < every[0], (len(small[0]), len(big[0]))
counts = torch.bincount(every[1], minlength=10).double()
for f, (bank, labels) in ((0.05, small), (0.2, big)):
    share = torch.bincount(labels, minlength=10).double()
    assert ((share - f * counts).abs() <= 1).all(), (f, share, counts)
print(f"ok: the 5% k-NN bank ({len(small[0])} rows) is inside the 20% bank ({len(big[0])}), each class within one row of its share")
PY

# 4. Segmentation: fractions by window (each image is a window here).
"$EMBCACHE" precompute --encoder demo_encoder.pt --dataset fashion_mnist_seg.h5 --out seg.h5 --quiet --no-fsync \
  --scale 0.00392157 --mean 0.286 --std 0.353 --dtype float16
"$EMBCACHE" train-probe --cache seg.h5 --out segf --task segmentation --head conv --levels 1 --epochs 1 --quiet \
  --train-fraction 0.1 --class-weights balanced >/dev/null
"$PYTHON" -c '
import json; m = json.load(open("segf/metrics.json")); c = m["combinations"][0]
assert c["train_rows"] == 300 and m["class_weights"]["mode"] == "balanced", (c["train_rows"], m.get("class_weights"))
print("ok: segmentation trains on 300 of 3000 windows at --train-fraction 0.1")' || fail "segmentation fraction"

# 4b. A grid of dense heads (one bank per learning rate) trains its banks side by side on the
#     cores --threads 1 leaves free, and each result is the lone run's, to the last digit.
seg=(--cache seg.h5 --task segmentation --head conv --levels 1 --epochs 2 --threads 1 --train-fraction 0.1 --quiet)
"$EMBCACHE" train-probe "${seg[@]}" --out seggrid --lr 1e-3,1e-2 >/dev/null
for lr in 1e-3 1e-2; do "$EMBCACHE" train-probe "${seg[@]}" --out seglone$lr --lr $lr >/dev/null; done
"$PYTHON" - "$(nproc)" <<'PY' || fail "dense banks side by side"
import json, sys
grid = json.load(open("seggrid/metrics.json"))
lanes = grid["timing"]["bank_lanes"]
assert lanes == min(2, int(sys.argv[1])), (lanes, sys.argv[1])
for c, lr in zip(grid["combinations"], ("1e-3", "1e-2")):
    lone = json.load(open(f"seglone{lr}/metrics.json"))["combinations"][0]
    assert c["val"] == lone["val"] and c["test"] == lone["test"] and c["best_epoch"] == lone["best_epoch"], (lr, c, lone)
print(f"ok: 2 conv heads on {lanes} lanes equal their lone runs")
PY

# 5. Bad input: one line each.
expect_error 3 "--train-fraction 0.001: class [0-9] would have no train rows (it has" \
  "$EMBCACHE" train-probe "${frac[@]}" --out bad --train-fraction 0.001
expect_error 2 "--train-fraction: expected fractions in (0, 1], got 2" "$EMBCACHE" train-probe "${frac[@]}" --out bad --train-fraction 2
expect_error 2 "--seeds: seed 0 is listed twice" "$EMBCACHE" train-probe "${grid[@]}" --out bad --seeds 0,1,0
expect_error 2 "--k: 200 is larger than the train split ('train', 151 rows at --train-fraction 0.05)" \
  "$EMBCACHE" train-probe --cache fm.h5 --task classification --head knn --levels 1 --k 200 --out bad --train-fraction 0.05
[[ ! -e bad ]] || fail "a refused run wrote its directory"

# 6. A study with seeds and fractions: fused into one pass, a ledger run per (seed, fraction),
#    results over seeds, the report's figures; a new seed trains only itself.
cat >study.json <<'JSON'
{ "version": 1, "output_dir": "out",
  "defaults": { "probe": { "task": "classification", "cache": "fm.h5", "epochs": 3, "batch_size": 128 } },
  "probes": [ { "name": "p", "head": "linear", "levels": [[0], [1]], "lr": 1e-2, "seeds": [0, 1],
                "train_fraction": [0.1, 1] } ] }
JSON
"$EMBCACHE" run study.json >study.txt
grep -q "8 probe runs (0 finished, 8 to run in 1 train-probe pass)" study.txt || fail "study plan: $(head -1 study.txt)"
grep -q "over seeds: accuracy mean +- std" study.txt || fail "study table over seeds: $(cat study.txt)"
"$EMBCACHE" report out >/dev/null
"$PYTHON" - <<'PY' || fail "study results over seeds"
import csv, re, statistics
rows = list(csv.DictReader(open("out/results.csv")))
assert len(rows) == 8 and {"C", "k", "train_fraction", "train_rows", "seed"} <= set(rows[0]), rows[0].keys()
assert {r["seed"] for r in rows} == {"0", "1"} and {r["train_fraction"] for r in rows} == {"0.1", "1"}
summary = list(csv.DictReader(open("out/results_over_seeds.csv")))
assert len(summary) == 4, summary
for s in summary:
    mine = [float(r["test_accuracy"]) for r in rows if re.sub(r",seed=\d+", "", r["name"]) == s["name"]]
    assert len(mine) == 2 and abs(float(s["test_mean"]) - statistics.mean(mine)) < 1e-6, (s, mine)
html = open("out/report.html").read()
for title in ("over seeds (dots: seeds", "vs label fraction", "runs over seeds"):
    assert title in html, title
print("ok: study: 8 runs in one pass, results.csv columns, results_over_seeds.csv, report figures")
PY
sed -i 's/"seeds": \[0, 1\]/"seeds": [0, 1, 2]/' study.json
"$EMBCACHE" run study.json >study2.txt
grep -q "12 probe runs (8 finished, 4 to run in 1 train-probe pass)" study2.txt || fail "a new seed: $(head -1 study2.txt)"
echo "ok: a third seed trains only its 4 runs"
