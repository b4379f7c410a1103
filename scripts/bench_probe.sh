#!/usr/bin/env bash
# Probe-training benchmark (docs/performance.md, "Many heads in one pass"). A synthetic float16 cache of 20k crops (level 0: 96x6x6,
# level 1: 1280x3x3, ~600 MB) and the real CLI for every tier; samples/s are per training epoch
# (metrics.json timing.samples_per_second). Prints each figure and the ratio to its target:
#   host tier       >= 1.5 x the simplest in-memory approach (yardstick, same process kind)
#   grid of 12      <= 2.0 x the time of 1 linear head
#   stream tier     >= 0.5 x host tier, peak RSS <= budget + 0.5 GB with the cache 4x the budget
#   cached          >= 20 x the same training with the encoder in the loop
#   knn             k = 10, 20, 50 in <= 1.5 x one float32 matrix product of the same sizes
#   logreg          a 10-value C path in <= 0.5 x 10 separate fits (and against scikit-learn)
#   dense heads     seconds per epoch of conv, fpn, unet and upernet against an eager PyTorch loop of the
#                   same head (<= 1.0x), and a grid of 3 learning rates against one head (<= 2x)
# GPU tier: only when CUDA is available.
# Usage: scripts/bench_probe.sh [WORK_DIR]   (default: a temporary directory)
# SECTIONS=6,7 runs only those sections; DEVICE=cpu|cuda is where section 6 trains both embcache's
# heads and the eager loop (default auto: the GPU where one is visible, as train-probe's default).
# From an existing build (a GPU node, no apt): BUILD_DIR=DIR with DIR/apps/embcache/embcache built
# skips scripts/setup.sh, and PYTHON=any python with torch, h5py and numpy (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
[[ -n ${BUILD_DIR:-} && -x $BUILD/apps/embcache/embcache ]] || scripts/setup.sh >/dev/null
WORK=${1:-$(mktemp -d /tmp/embcache-bench-probe-XXXXXX)}
mkdir -p "$WORK"
PY=${PYTHON:-/usr/bin/python3}
E=$BUILD/apps/embcache/embcache
B=$BUILD/bench/bench_probe
CACHE=$WORK/synthetic.h5
EPOCHS=${EPOCHS:-3}
DEVICE=${DEVICE:-auto}
want() { [[ -z ${SECTIONS:-} || ",$SECTIONS," == *",$1,"* ]]; }

CROPS=${CROPS:-20000}  # 14,976 float16 values (~30 KB) per crop: CROPS=2000000 is a ~60 GB cache, for a GPU
[[ -f $CACHE ]] || "$B" make-cache "$CACHE" "$CROPS" >/dev/null
CACHE_BYTES=$(stat -c %s "$CACHE")
BUDGET=$((CACHE_BYTES / 4))
# The encoder the cache stands for: a small CNN from 3x96x96 images to the same two levels.
$PY tests/python/fixtures.py encoders "$WORK/enc" >/dev/null

probe() {  # probe NAME [train-probe options...]: prints samples/s; metrics in $WORK/NAME
  local name=$1
  shift
  "$E" train-probe --cache "$CACHE" --out "$WORK/$name" --task classification --epochs "$EPOCHS" --quiet "$@" >/dev/null
  $PY -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["timing"]["samples_per_second"]))' "$WORK/$name/metrics.json"
}
field() { $PY -c 'import json,sys; j=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): j=j[k]
print(j)' "$WORK/$1/metrics.json" "$2"; }
ratio() { $PY -c 'import sys; print(f"{float(sys.argv[1])/float(sys.argv[2]):.2f}")' "$1" "$2"; }

echo "cache: $CACHE ($((CACHE_BYTES / 1000000)) MB, $CROPS crops, float16); $EPOCHS epochs per run; $(nproc) cores"
if want 1; then
echo
echo "== 1. host tier vs the simplest in-memory approach (one linear head, level 1: 1280x3x3) =="
host=$(probe host-linear --levels 1 --tier host)
yard=$("$B" yardstick "$CACHE" 1 "$EPOCHS" | $PY -c 'import json,sys; v=json.load(sys.stdin)["samples_per_second"]; print(round(sum(v)/len(v)))')
echo "host tier:  $host samples/s   yardstick: $yard samples/s   ratio $(ratio "$host" "$yard") (target >= 1.5)"
fi
if want 2; then
echo
echo "== 2. twelve linear heads in one pass vs one (6 learning rates x 2 weight decays) =="
GRID=(--lr 1e-4,3e-4,1e-3,3e-3,1e-2,3e-2 --weight-decay 0,1e-4)
for level in 0 1; do
  for tier in host stream; do
    probe g1-$level-$tier --levels $level --tier $tier --host-memory-budget "$BUDGET" >/dev/null
    probe g12-$level-$tier --levels $level --tier $tier --host-memory-budget "$BUDGET" "${GRID[@]}" >/dev/null
    one=$(field g1-$level-$tier timing.train_seconds)
    twelve=$(field g12-$level-$tier timing.train_seconds)
    echo "level $level, $tier tier: 1 head $(printf %.3f "$one")s, 12 heads $(printf %.3f "$twelve")s," \
         "grid12/grid1 $(ratio "$twelve" "$one") (target <= 2.0)"
  done
done
fi
if want 3; then
echo
echo "== 3. stream tier (budget = cache / 4 = $((BUDGET / 1000000)) MB) vs host tier =="
stream_vs_host() {  # stream_vs_host NAME [head options...]
  local name=$1
  shift
  local h s rss
  h=$(probe host-$name --levels 1 --tier host "$@")
  s=$(probe stream-$name --levels 1 --tier stream --host-memory-budget "$BUDGET" "$@")
  rss=$(field stream-$name data.peak_rss_bytes)
  echo "$name: host $h samples/s, stream $s samples/s, stream/host $(ratio "$s" "$h") (target >= 0.5);" \
       "stream peak RSS $((rss / 1000000)) MB (limit: budget + 500 MB = $(((BUDGET + 500000000) / 1000000)) MB);" \
       "trainer waited $(field stream-$name data.wait_fraction | cut -c1-5) of the time"
}
stream_vs_host conv-head --head conv --hidden 64 --conv-blocks 1
stream_vs_host linear-head --head linear
fi
if want 4; then
echo
echo "== 4. cached vs encoder in the loop (linear head on level 1, batches of 256 images 3x96x96) =="
[[ -n ${host:-} ]] || host=$(probe host-linear --levels 1 --tier host)
loop=$("$B" encoder-loop "$WORK/enc/bench_probe.pt" 10 | $PY -c 'import json,sys; print(json.load(sys.stdin)["samples_per_second"])')
echo "cached (host tier): $host samples/s   encoder in the loop: $loop samples/s   ratio $(ratio "$host" "$loop") (target >= 20)"
fi
if want 5; then
echo
echo "== 5. k-NN and logistic regression on level 1 pooled (1280-d) =="
probe knn --levels 1 --head knn --k 10,20,50 --tier host >/dev/null
train=$(field knn splits.train.rows) queries=$(( $(field knn splits.val.rows) + $(field knn splits.test.rows) ))
mm=$("$B" matmul "$queries" "$train" 1280 | $PY -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
# The k-NN time includes reading the pooled queries and train rows from the host tier.
knn_s=$(field knn timing.train_seconds)
echo "knn k=10,20,50: $train train x $queries val+test rows in $(printf %.3f "$knn_s")s; one float32 matrix product" \
     "[$queries x 1280] x [1280 x $train]: $(printf %.3f "$mm")s; ratio $(ratio "$knn_s" "$mm") (target <= 1.5)"
CS=1e-4,1e-3,1e-2,3e-2,0.1,0.3,1,3,10,100
probe logreg10 --levels 1 --head logreg --C $CS --tier host >/dev/null
path=$(field logreg10 timing.train_seconds) separate=0
for c in ${CS//,/ }; do
  probe logreg-$c --levels 1 --head logreg --C "$c" --tier host >/dev/null
  separate=$($PY -c 'import sys; print(float(sys.argv[1]) + float(sys.argv[2]))' "$separate" "$(field logreg-$c timing.train_seconds)")
done
echo "logreg, 10 values of C: one warm-started path $(printf %.3f "$path")s, 10 separate fits $(printf %.3f "$separate")s," \
     "ratio $(ratio "$path" "$separate") (target <= 0.5)"
if $PY -c 'import sklearn' 2>/dev/null; then
  $PY tests/python/probe_checks.py sklearn-logreg "$CACHE" "$WORK/logreg10" --points 100 | tail -1
fi
fi
if want 6; then
echo
echo "== 6. dense heads: seconds per epoch on the demo segmentation data (8,000 train crops, 28x28 masks) =="
# Levels of the demo CNN: 0 is 16x14x14, 1 is 32x7x7; batch auto (64 on a dense task).
SEG=$WORK/seg
[[ -f $SEG/seg.h5 ]] || {
  $PY scripts/data/make_demo_data.py "$SEG" --train 8000 --val 1000 --test 2000 >/dev/null
  "$E" precompute --encoder "$SEG/demo_encoder.pt" --dataset "$SEG/fashion_mnist_seg.h5" --out "$SEG/seg.h5" \
    --scale 0.00392157 --mean 0.286 --std 0.353 --dtype float16 --quiet --no-fsync
}
dense() {  # dense NAME HEAD LEVELS [options]: seconds per training epoch
  local name=$1 head=$2 levels=$3
  shift 3
  "$E" train-probe --cache "$SEG/seg.h5" --out "$WORK/$name" --task segmentation --head "$head" --levels "$levels" \
    --epochs 2 --device "$DEVICE" --quiet "$@" >/dev/null
  $PY -c 'import json,sys; t=json.load(open(sys.argv[1]))["timing"]; print("%.2f" % (t["train_seconds"] / t["epochs"]))' \
    "$WORK/$name/metrics.json"
}
# The yardstick: the same head, batch (64) and optimizer as an eager PyTorch loop over the train
# split's features in memory (scripts/peers/dense_eager.py), in this run.
eager() {  # eager HEAD LEVELS WIDTH [LRS]: seconds per epoch of all LRS one after another
  $PY scripts/peers/dense_eager.py "$SEG/seg.h5" --head "$1" --levels "$2" --width "$3" --lrs "${4:-1e-3}" --epochs 2 --device "$DEVICE" |
    $PY -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["grid_seconds_per_epoch"])'
}
conv=$(dense d-conv conv 1)
conv_eager=$(eager conv 1 128)
echo "conv (level 1, width 128): ${conv}s per epoch; eager PyTorch ${conv_eager}s: $(ratio "$conv" "$conv_eager") x (target <= 1.0)"
for spec in "fpn 0+1" "unet 0+1" "upernet 1 --hidden 128" "upernet 0+1 --hidden 128"; do
  set -- $spec
  s=$(dense "d-${spec// /_}" "$@")
  e=$(eager "$1" "$2" 128)
  echo "$spec: ${s}s per epoch, $(ratio "$s" "$conv") x the conv head; eager PyTorch ${e}s: $(ratio "$s" "$e") x (target <= 1.0)"
done
grid=$(dense d-conv-3lr conv 1 --lr 1e-3,3e-3,1e-2)
grid_eager=$(eager conv 1 128 1e-3,3e-3,1e-2)
echo "conv, a grid of 3 learning rates: ${grid}s per epoch, $(ratio "$grid" "$conv") x one head (target <= 2);" \
     "eager PyTorch, the 3 one after another: ${grid_eager}s"
# UPerNet at its default width (512, as PANGAEA) costs about 16x its width-128 FLOPs: on a CPU
# it is timed on 1/8 of the train rows and scaled to the whole split.
s=$(dense d-upernet-512 upernet 1 --train-fraction 0.125)
s=$($PY -c 'import sys; print(f"{float(sys.argv[1]) * 8:.2f}")' "$s")
e=$($PY scripts/peers/dense_eager.py "$SEG/seg.h5" --head upernet --levels 1 --width 512 --epochs 2 --train-fraction 0.125 --device "$DEVICE" |
    $PY -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["grid_seconds_per_epoch"] * 8))')
echo "upernet 1 (width 512): ${s}s per epoch (from 1/8 of the rows), $(ratio "$s" "$conv") x the conv head;" \
     "eager PyTorch ${e}s: $(ratio "$s" "$e") x (target <= 1.0)"
fi
if want 7; then
echo
echo "== 7. GPU tier =="
if $PY -c 'import sys; sys.exit(0)' && "$E" train-probe --help >/dev/null && [[ -e /dev/nvidia0 ]]; then
  g=$(probe gpu-linear --levels 1 --device cuda --tier gpu)
  gh=$(probe gpu-host-linear --levels 1 --device cuda --tier host)
  echo "GPU tier: $g samples/s   host tier feeding the GPU: $gh samples/s"
else
  echo "no CUDA device here: skipped"
fi
fi
echo
echo "outputs in $WORK"
