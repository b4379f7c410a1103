#!/usr/bin/env bash
# Caches of parts, measured (docs/performance.md, "Reruns cost what is new"):
#  1. adding 1% new windows to a cache of ~2 GB (light benchmark encoder) against computing that
#     1% into an empty cache: the rerun writes only the new rows (it still reads and hashes every
#     window of the dataset, which is what staleness needs);
#  2. train-probe epochs over a cache of 16 parts against the same rows in one file, host and
#     stream tiers;
#  3. bench_parts: installing the k-th of 1,000 parts, inspect of a 1,000-part cache, and the
#     balance of --shard I/N for larger N.
# Usage: scripts/bench_scale.sh [WORK_DIR]   (needs ~5 GB free there; REPEATS=3 by default;
#        SECTIONS=2 runs section 2 only, SECTIONS=13 sections 1 and 3)
# From an existing build: BUILD_DIR=DIR, PYTHON=a python with torch, h5py and numpy.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
[[ -n ${BUILD_DIR:-} && -x $BUILD/apps/embcache/embcache ]] || scripts/setup.sh >/dev/null
EMB=$PWD/$BUILD/apps/embcache/embcache
PY=${PYTHON:-/usr/bin/python3}
WORK=${1:-$(mktemp -d /tmp/embcache-bench-scale-XXXXXX)}
REPEATS=${REPEATS:-3}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
$PY tests/python/fixtures.py encoders "$WORK/enc" >/dev/null
SECTIONS=${SECTIONS:-123}
field() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

if [[ $SECTIONS == *1* ]]; then
echo "== 1. adding 1% new windows to a ~2 GB cache (light encoder, 64x64 windows, whole-window crops) =="
# The dataset: N windows, then N/100 more with new names; the 1% alone for the yardstick.
OPTS=(--encoder "$WORK/enc/light.pt" --batch-size 32 --threads 2 --quiet --no-fsync)
$PY - "$WORK" <<'PY'
import h5py, numpy as np, sys
work = sys.argv[1]
rng = np.random.default_rng(0)
def write(path, images, names):
    with h5py.File(path, "w") as f:
        f["images"] = images
        f["labels"] = np.arange(len(names)) % 10
        f.create_dataset("names", data=names, dtype=h5py.string_dtype())
        f.create_dataset("splits", data=["train"] * len(names), dtype=h5py.string_dtype())
probe = rng.integers(0, 256, (64, 3, 64, 64), dtype=np.uint8)
write(f"{work}/probe.h5", probe, [f"p{i}" for i in range(64)])
PY
"$EMB" precompute "${OPTS[@]}" --dataset "$WORK/probe.h5" --out "$WORK/probe-cache.h5" --overwrite --summary-json "$WORK/probe.json"
per_crop=$(( $(field "$WORK/probe.json" bytes_written) / 64 ))
N=$(( 2000000000 / per_crop ))
echo "light encoder: $per_crop feature bytes per crop: $N windows make ~2 GB"
$PY - "$WORK" "$N" <<'PY'
import h5py, numpy as np, sys
work, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(1)
extra = n // 100
images = rng.integers(0, 256, (n + extra, 3, 64, 64), dtype=np.uint8)
names = [f"w{i}" for i in range(n)] + [f"new{i}" for i in range(extra)]
def write(path, rows):
    with h5py.File(path, "w") as f:
        f["images"] = images[rows]
        f["labels"] = np.arange(len(rows)) % 10
        f.create_dataset("names", data=[names[i] for i in rows], dtype=h5py.string_dtype())
        f.create_dataset("splits", data=["train"] * len(rows), dtype=h5py.string_dtype())
write(f"{work}/base.h5", np.arange(n))
write(f"{work}/grown.h5", np.arange(n + extra))
write(f"{work}/new.h5", np.arange(n, n + extra))
PY
"$EMB" precompute "${OPTS[@]}" --dataset "$WORK/base.h5" --out "$WORK/base-cache.h5" --overwrite --summary-json "$WORK/base.json"
echo "base cache: $(field "$WORK/base.json" crops_computed) crops, $(( $(field "$WORK/base.json" cache_bytes) / 1000000 )) MB in $(field "$WORK/base.json" seconds) s"
for i in $(seq "$REPEATS"); do
  for mode in add addnew; do
    rm -rf "$WORK/add.h5" "$WORK/add.h5.parts" "$WORK/empty.h5"
    cp "$WORK/base-cache.h5" "$WORK/add.h5"
    sync
    extra=(); [[ $mode == addnew ]] && extra=(--only-new-windows)
    "$EMB" precompute "${OPTS[@]}" "${extra[@]}" --dataset "$WORK/grown.h5" --out "$WORK/add.h5" --summary-json "$WORK/$mode-$i.json"
    sync
  done
  "$EMB" precompute "${OPTS[@]}" --dataset "$WORK/new.h5" --out "$WORK/empty.h5" --summary-json "$WORK/empty-$i.json"
done
$PY - "$WORK" "$REPEATS" <<'PY'
import json, statistics, sys
work, n = sys.argv[1], int(sys.argv[2])
emp = [json.load(open(f"{work}/empty-{i}.json")) for i in range(1, n + 1)]
e = [j["seconds"] for j in emp]
print(f"the 1% into an empty cache: median {statistics.median(e):.2f} s (range {min(e):.2f}-{max(e):.2f}), "
      f"{emp[0]['crops_computed']} crops")
for mode, what in (("add", "add 1%, every window read and hashed (default)"), ("addnew", "add 1% with --only-new-windows")):
    add = [json.load(open(f"{work}/{mode}-{i}.json")) for i in range(1, n + 1)]
    a = [j["seconds"] for j in add]
    j = add[0]
    print(f"{what}: {j['crops_computed']} crops computed, {j['crops_skipped']} checked and cached, "
          f"{j['windows_not_read']} windows not read, rows copied {j['rows_copied_at_end']}, "
          f"{j['bytes_written'] / 1e6:.1f} MB written, parts after: {j['cache_parts']}")
    print(f"  wall median {statistics.median(a):.2f} s (range {min(a):.2f}-{max(a):.2f}); "
          f"ratio to the empty cache {statistics.median(a) / statistics.median(e):.2f} (target <= 1.5)")
PY

fi

if [[ $SECTIONS == *2* ]]; then
echo "== 2. train-probe epochs: a cache of 16 parts against the same rows in one file =="
$PY scripts/data/make_demo_data.py "$WORK/fm" --train 20000 --val 2000 --test 2000 >/dev/null
POPTS=(--encoder "$WORK/fm/demo_encoder.pt" --dataset "$WORK/fm/fashion_mnist.h5" --scale 0.00392157 --mean 0.286 --std 0.353
       --dtype float16 --batch-size 64 --threads 2 --quiet --no-fsync)
if [[ ! -f $WORK/parts16.h5 ]]; then
  for i in $(seq 0 15); do "$EMB" precompute "${POPTS[@]}" --out "$WORK/parts16.h5" --shard "$i/16"; done
  mkdir -p "$WORK/one" && cp -a "$WORK/parts16.h5" "$WORK/parts16.h5.parts" "$WORK/one/"
  "$EMB" compact "$WORK/one/parts16.h5"
fi
"$EMB" inspect "$WORK/parts16.h5" | head -2
for tier in host stream; do
  budget=$([[ $tier == host ]] && echo 4G || echo 64M)
  for i in $(seq "$REPEATS"); do
    for c in "$WORK/parts16.h5" "$WORK/one/parts16.h5"; do
      label=$([[ $c == */one/* ]] && echo one || echo parts)
      "$EMB" train-probe --cache "$c" --out "$WORK/probe-$tier-$label-$i" --task classification --head linear,mlp \
        --levels 0 --lr 1e-3,1e-2 --epochs 5 --tier $tier --host-memory-budget $budget --quiet >/dev/null
    done
  done
done
$PY - "$WORK" "$REPEATS" <<'PY'
import json, statistics, sys
work, n = sys.argv[1], int(sys.argv[2])
for tier in ("host", "stream"):
    t = {}
    for label in ("parts", "one"):
        runs = [json.load(open(f"{work}/probe-{tier}-{label}-{i}/metrics.json")) for i in range(1, n + 1)]
        assert all(r["data"]["tier"] == tier for r in runs), [r["data"]["tier"] for r in runs]
        t[label] = [r["timing"]["train_seconds"] / r["timing"]["epochs"] for r in runs]
    p, o = statistics.median(t["parts"]), statistics.median(t["one"])
    print(f"{tier:6} tier: seconds per epoch, 16 parts median {p:.3f} ({min(t['parts']):.3f}-{max(t['parts']):.3f}), "
          f"one file {o:.3f} ({min(t['one']):.3f}-{max(t['one']):.3f}); speed of parts / one file {o / p:.2f} (target >= 0.9)")
PY

fi

if [[ $SECTIONS == *3* ]]; then
echo "== 3. parts: installs, a 1,000-part inspect, shard balance =="
"$BUILD/bench/bench_parts" "$WORK/parts" 1000
KEEP=1 "$BUILD/bench/bench_parts" "$WORK/parts" 1000 >/dev/null
for i in 1 2 3; do /usr/bin/time -f "embcache inspect of a 1,000-part cache (a new process): %e s, %M KB" "$EMB" inspect "$WORK/parts/cache.h5" >/dev/null; done
rm -rf "$WORK/parts"
fi
