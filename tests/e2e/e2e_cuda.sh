#!/usr/bin/env bash
# On a GPU, end to end: precompute on CUDA writes the CPU's features (within TF32's rounding, and
# --amp within half precision's), and train-probe on CUDA trains as it does on the CPU in every
# tier (gpu, host, stream), for linear grids, k-NN, L-BFGS logistic regression and dense heads; the
# head.pt of a GPU run is a CPU module that reproduces the reported metric. Exits 77 (ctest: skipped)
# where LibTorch sees no CUDA device; tests/unit/pipeline/test_cuda.cpp holds the exact comparison (TF32 off).
source "$(dirname "$0")/lib.sh"
: "${PROBE_PY:?run through ctest}" "${DEMO_DATA_PY:?}"
probe() { "$PYTHON" "$PROBE_PY" "$@"; }
CUDA_LINE=$("$EMBCACHE" --version | grep "^CUDA")
if ! grep -qE "devices?:" <<<"$CUDA_LINE"; then
  echo "no CUDA device visible ($CUDA_LINE): skipped"
  exit 77
fi

# max |a - b| / max |b| per level of two caches with the same rows; fails above LIMIT.
close() {  # close A B LIMIT WHAT
  "$PYTHON" - "$@" <<'PY' || fail "$4: features differ"
import sys, h5py, numpy as np
a, b, limit, what = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
    assert list(fa["index/window"][:]) == list(fb["index/window"][:])
    worst = 0.0
    for name in fa["levels"]:
        x, y = fa["levels/" + name][:].astype("f8"), fb["levels/" + name][:].astype("f8")
        rel = float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-12))
        print(f"{what}: level {name}: max |a - b| / max |b| = {rel:.2e} (limit {limit:g})")
        worst = max(worst, rel)
sys.exit(0 if worst <= limit else 1)
PY
}
metric() { "$PYTHON" -c 'import json,sys; m=json.load(open(sys.argv[1] + "/metrics.json")); print(m["test"][sys.argv[2]])' "$1" "$2"; }
near() {  # near A B TOLERANCE WHAT
  "$PYTHON" -c 'import sys; a, b, t = map(float, sys.argv[1:4]); print(f"{sys.argv[4]}: {a:.4f} vs {b:.4f} (tolerance {t:g})"); sys.exit(0 if abs(a - b) <= t else 1)' "$@" ||
    fail "$4 differs"
}

"$PYTHON" "$DEMO_DATA_PY" . --train 3000 --val 500 --test 1000 >/dev/null
pre() {  # pre OUT DEVICE [options]
  local out=$1 device=$2
  shift 2
  "$EMBCACHE" precompute --encoder demo_encoder.pt --dataset fashion_mnist.h5 --out "$out" --quiet --no-fsync \
    --scale 0.00392157 --mean 0.286 --std 0.353 --device "$device" "$@"
}
pre cpu.h5 cpu --dtype float32
pre cuda.h5 cuda --dtype float32
"$PYTHON" -c 'import h5py, json, sys; w = json.loads(h5py.File("cuda.h5", "r").attrs["signature"])["computed_with"]; print(w); sys.exit(w["device"] != "cuda:0")' ||
  fail "the cache does not say it was computed on cuda:0"
close cuda.h5 cpu.h5 1e-2 "cuda (TF32 as LibTorch's default) vs cpu"
pre bf16.h5 cuda --dtype float32 --amp bf16
close bf16.h5 cpu.h5 5e-2 "cuda --amp bf16 vs cpu"
pre fp16.h5 cuda --dtype float16 --amp fp16
pre int8.h5 cuda --dtype int8
pre int8-cpu.h5 cpu --dtype int8

# Linear grids in every tier on the GPU against the same grid on the CPU.
lin() {  # lin OUT CACHE DEVICE [options]
  local out=$1 cache=$2 device=$3
  shift 3
  "$EMBCACHE" train-probe --cache "$cache" --out "$out" --task classification --head linear --levels 1 \
    --lr 3e-3,1e-2,3e-2 --epochs 15 --device "$device" --quiet "$@" >/dev/null
}
lin lin-cpu cpu.h5 cpu
for tier in gpu host stream; do
  lin lin-$tier cpu.h5 cuda --tier $tier --host-memory-budget 16M
  "$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1] + "/metrics.json"))["data"]; sys.exit(d["tier"] != sys.argv[2])' lin-$tier $tier ||
    fail "lin-$tier did not train from the $tier tier"
  near "$(metric lin-$tier accuracy)" "$(metric lin-cpu accuracy)" 0.02 "linear grid, test accuracy, cuda $tier tier vs cpu"
done
probe head cpu.h5 lin-gpu
# int8 caches de-quantised on the GPU; fp16 autocast features train as well.
lin lin-int8 int8.h5 cuda --tier gpu
lin lin-int8-cpu int8-cpu.h5 cpu
near "$(metric lin-int8 accuracy)" "$(metric lin-int8-cpu accuracy)" 0.02 "int8 cache (quantised on cuda) on the gpu tier vs int8 on cpu"
lin lin-fp16 fp16.h5 cuda --tier gpu
near "$(metric lin-fp16 accuracy)" "$(metric lin-cpu accuracy)" 0.03 "--amp fp16 cache on the gpu tier vs float32 on cpu"

# k-NN and logistic regression on the GPU against their references.
"$EMBCACHE" train-probe --cache cpu.h5 --out knn --task classification --head knn --levels 1 --k 1,10,20 --device cuda --quiet >/dev/null
probe knn cpu.h5 knn || fail "knn on cuda differs from the reference"
"$EMBCACHE" train-probe --cache cpu.h5 --out logreg --task classification --head logreg --levels 1 --C 1e-2,0.1,1 \
  --device cuda --quiet >/dev/null
probe sklearn-logreg cpu.h5 logreg || fail "logreg on cuda differs from scikit-learn"
probe head cpu.h5 logreg

# Dense heads: segmentation on the GPU tier reaches the CPU's mIoU; a 3-lr grid trains as one bank.
probe segdata seg.h5 --n 600
"$EMBCACHE" precompute --encoder demo_encoder.pt --dataset seg.h5 --out seg_cache.h5 --levels 0,1 --quiet --no-fsync \
  --scale 0.00392157 --mean 0.5 --std 0.25 --device cuda
for head in conv upernet; do
  levels=0; [[ $head != conv ]] && levels=0+1
  for device in cpu cuda; do
    "$EMBCACHE" train-probe --cache seg_cache.h5 --out seg-$head-$device --task segmentation --head $head --levels $levels \
      --lr 3e-3 --epochs 15 --batch-size 32 --hidden 32 --device $device --quiet >/dev/null
  done
  near "$(metric seg-$head-cuda miou)" "$(metric seg-$head-cpu miou)" 0.03 "$head, test mIoU, cuda vs cpu"
  probe head seg_cache.h5 seg-$head-cuda
done
"$EMBCACHE" train-probe --cache seg_cache.h5 --out seg-grid --task segmentation --head conv --levels 0 \
  --lr 1e-3,3e-3,1e-2 --epochs 15 --batch-size 32 --hidden 32 --device cuda --quiet >/dev/null
"$PYTHON" - <<'PY' || fail "the conv grid on cuda"
import json
g = json.load(open("seg-grid/metrics.json"))
one = json.load(open("seg-conv-cuda/metrics.json"))
member = [c for c in g["combinations"] if abs(c["lr"] - 3e-3) < 1e-12][0]
print(f"conv grid member lr=3e-3: val mIoU {member['val']['miou']:.4f}; the head alone {one['val']['miou']:.4f}")
assert len(g["combinations"]) == 3 and abs(member["val"]["miou"] - one["val"]["miou"]) <= 0.02
PY
echo "e2e_cuda: all checks passed ($CUDA_LINE)"
