#!/usr/bin/env bash
# Caches made of parts (docs/scale-out.md): shards launched at once into one cache give the
# single-process cache bit for bit; h5py reads the view with the documented snippet; a rerun that
# adds rows writes only them; stale rows are hidden; a missing part is named and recomputed;
# compaction keeps the rows; bad input gets one line each.
source "$(dirname "$0")/lib.sh"
: "${DEMO_DATA_PY:?run through ctest}"

"$PYTHON" "$DEMO_DATA_PY" . --train 300 --val 100 --test 100 >/dev/null
OPTS=(--encoder demo_encoder.pt --dataset fashion_mnist.h5 --scale 0.00392157 --mean 0.286 --std 0.353
      --crop-size 20 --overlap 2 --dtype float16 --batch-size 16 --threads 1 --quiet --no-fsync)
summary() { "$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

# 1. The single-process cache, and three shards launched at once into one cache.
"$EMBCACHE" precompute "${OPTS[@]}" --out ref.h5
pids=()
for i in 0 1 2; do
  "$EMBCACHE" precompute "${OPTS[@]}" --out shard.h5 --shard $i/3 --summary-json s$i.json 2>s$i.err &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "a shard failed: $(cat s*.err)"; done
fx same ref.h5 shard.h5 || fail "3 shards at once differ from the single-process cache"
total=$(( $(summary s0.json crops_computed) + $(summary s1.json crops_computed) + $(summary s2.json crops_computed) ))
(( total == 2000 )) || fail "shards computed $total crops, not the dataset's 2000"
"$EMBCACHE" inspect shard.h5 --json >shard.json
"$EMBCACHE" inspect shard.h5 | grep -q "shards of 3: done 0 1 2;" || fail "inspect: $("$EMBCACHE" inspect shard.h5)"
"$PYTHON" - <<'PY' || fail "inspect of the sharded cache"
import json
j = json.load(open("shard.json"))
assert j["format"] == 3 and len(j["parts"]) == 3 and j["complete"] is True, j
assert j["shards"] == [{"count": 3, "done": [0, 1, 2], "interrupted": [], "failed": [], "running": [], "missing": []}], j["shards"]
assert sorted(p["shard"] for p in j["parts"]) == ["0/3", "1/3", "2/3"]
for p in j["parts"]:
    w = p["computed_with"]
    assert w["device"] == "cpu" and w["amp"] == "none" and w["shard"] == p["shard"] and w["torch"], w
print("ok: inspect lists 3 parts, shards 0-2 done, each with its device, torch and amp")
PY

# 2. h5py reads the view with the snippet of docs/cache-format.md, and sees one cache.
"$PYTHON" - <<'PY' || fail "h5py through the view"
import h5py, numpy as np
with h5py.File("shard.h5", "r") as f, h5py.File("ref.h5", "r") as r:
    split = f["index/split"].asstr()[:]
    rows = np.flatnonzero(split == "train")
    x = f["levels/1"][:][rows]
    y = f["labels/class"][:][rows]
    keys = list(zip(f["index/group"].asstr()[:], f["index/window"].asstr()[:], map(tuple, f["index/bounds"][:])))
    assert len(keys) == len(set(keys)) == len(r["index/window"]), "no key twice"
    assert x.dtype == np.float16 and not np.isnan(x).any() and len(y) == len(rows)
    assert f["levels/1"].is_virtual and not r["levels/1"].is_virtual
print("ok: h5py reads the view as one cache")
PY

# 3. A probe trains alike on the view and on its compacted copy; k-NN alike on the view and the
#    single-process cache (its result does not depend on row order).
mkdir compacted && cp -a shard.h5 shard.h5.parts compacted/
"$EMBCACHE" compact compacted/shard.h5 | grep -q "3 parts rewritten into one file" || fail "compact"
[[ ! -e compacted/shard.h5.parts ]] || fail "compact left the parts"
fx same ref.h5 compacted/shard.h5 >/dev/null || fail "compacted cache differs"
for c in shard.h5 compacted/shard.h5; do
  "$EMBCACHE" train-probe --cache $c --out probe-$(dirname $c) --task classification --head linear --levels 1 \
    --lr 1e-2 --epochs 3 --quiet
done
for tier in host stream; do
  "$EMBCACHE" train-probe --cache shard.h5 --out knn-$tier --task classification --head knn --k 5 --levels 1 \
    --tier $tier --host-memory-budget $([[ $tier == host ]] && echo 1G || echo 4M) --quiet
done
"$EMBCACHE" train-probe --cache ref.h5 --out knn-ref --task classification --head knn --k 5 --levels 1 --quiet
"$PYTHON" - <<'PY' || fail "probes over parts"
import json
m = {d: json.load(open(f"{d}/metrics.json")) for d in ("probe-.", "probe-compacted", "knn-host", "knn-stream", "knn-ref")}
assert m["probe-."]["test"] == m["probe-compacted"]["test"], (m["probe-."]["test"], m["probe-compacted"]["test"])
assert m["knn-host"]["test"]["accuracy"] == m["knn-ref"]["test"]["accuracy"] == m["knn-stream"]["test"]["accuracy"]
assert m["knn-stream"]["data"]["tier"] == "stream"
print(f"ok: linear probe equal on the view and the compacted file; k-NN test accuracy {m['knn-ref']['test']['accuracy']:.4f} on all")
PY
id_before=$("$EMBCACHE" inspect shard.h5 --json | "$PYTHON" -c "import json,sys; print(json.load(sys.stdin)['content_id'])")
id_after=$("$EMBCACHE" inspect compacted/shard.h5 --json | "$PYTHON" -c "import json,sys; print(json.load(sys.stdin)['content_id'])")
[[ $id_before == "$id_after" ]] || fail "compaction changed the content id"

# 4. A rerun (whole dataset) computes nothing and leaves the parts as they are.
"$EMBCACHE" precompute "${OPTS[@]}" --out shard.h5 --summary-json again.json
[[ $(summary again.json crops_computed) -eq 0 && $(summary again.json cache_parts) -eq 3 ]] || fail "rerun: $(cat again.json)"

# 5. Adding windows writes only them: the first cache becomes the first part by a hard link.
"$EMBCACHE" precompute "${OPTS[@]}" --out inc.h5 --shard 0/2
inode=$(stat -c %i inc.h5)
"$EMBCACHE" precompute "${OPTS[@]}" --out inc.h5 --shard 1/2 --summary-json inc.json
[[ $(summary inc.json rows_copied_at_end) -eq 0 && $(summary inc.json cache_parts) -eq 2 ]] || fail "$(cat inc.json)"
ls -i inc.h5.parts | grep -q "^ *$inode " || fail "the first cache was copied, not linked, into its part"
fx same ref.h5 inc.h5 >/dev/null || fail "two halves differ from the single-process cache"

# 5b. --only-new-windows: the windows already cached are not read at all (nor checked for changes).
"$EMBCACHE" precompute "${OPTS[@]}" --out onlynew.h5 --shard 0/2 --summary-json half.json
"$EMBCACHE" precompute "${OPTS[@]}" --out onlynew.h5 --only-new-windows --summary-json onlynew.json
[[ $(summary onlynew.json windows_not_read) -eq $(summary half.json windows) &&
   $(summary onlynew.json windows) -eq $(( 500 - $(summary half.json windows) )) &&
   $(summary onlynew.json crops_skipped) -eq 0 ]] || fail "--only-new-windows: $(cat onlynew.json)"
fx same ref.h5 onlynew.h5 >/dev/null || fail "--only-new-windows gave another cache"

# 6. --shard slurm takes the task's place in its array.
SLURM_ARRAY_TASK_ID=7 SLURM_ARRAY_TASK_MIN=6 SLURM_ARRAY_TASK_COUNT=2 \
  "$EMBCACHE" precompute "${OPTS[@]}" --out slurm.h5 --shard slurm --summary-json slurm.json
[[ $(summary slurm.json shard) == 1/2 ]] || fail "slurm shard: $(cat slurm.json)"

# 7. Stale rows: a window whose pixels changed is recomputed and its old rows hidden.
cp fashion_mnist.h5 edited.h5
"$PYTHON" -c "import h5py; f = h5py.File('edited.h5', 'r+'); f['images'][0] = 255 - f['images'][0]"
mkdir stale && cp -a shard.h5 shard.h5.parts stale/
"$EMBCACHE" precompute "${OPTS[@]/fashion_mnist.h5/edited.h5}" --out stale/shard.h5 --summary-json stale.json
[[ $(summary stale.json crops_stale) -gt 0 && $(summary stale.json superseded_rows) -eq $(summary stale.json crops_stale) ]] ||
  fail "stale: $(cat stale.json)"
"$EMBCACHE" precompute "${OPTS[@]/fashion_mnist.h5/edited.h5}" --out edited-ref.h5
fx same edited-ref.h5 stale/shard.h5 >/dev/null || fail "stale rows visible, or recomputed rows differ"

# 8. A missing part: named in one line, the other parts intact; h5py sees NaN there, not zeros;
#    a rerun computes its rows again.
mkdir miss && cp -a shard.h5 shard.h5.parts miss/
gone=$(ls miss/shard.h5.parts | head -1)
rm miss/shard.h5.parts/$gone
expect_error 3 "part shard.h5.parts/$gone is missing" "$EMBCACHE" train-probe --cache miss/shard.h5 --out x \
  --task classification --levels 1 --quiet
expect_error 3 "parts cannot be read: shard.h5.parts/$gone (missing)" "$EMBCACHE" inspect miss/shard.h5
# (From the cache's folder: HDF5 looks for a part missing there in the current directory too,
# where this test's intact copy is; docs/cache-format.md says so.)
(cd miss && "$PYTHON" - <<'PY') || fail "h5py over a missing part"
import h5py, numpy as np
with h5py.File("shard.h5", "r") as f:
    x = f["levels/1"][:]
    missing = np.isnan(x.reshape(len(x), -1)).all(axis=1)
    y = f["labels/class"][:]
    assert 0 < missing.sum() < len(x) and (y[missing] == -1).all() and (y[~missing] >= 0).all()
print(f"ok: {missing.sum()} rows of the missing part read as NaN features and class -1")
PY
"$EMBCACHE" precompute "${OPTS[@]}" --out miss/shard.h5 --summary-json miss.json
[[ $(summary miss.json crops_computed) -gt 0 ]] || fail "the missing part's rows were not computed again"
fx same ref.h5 miss/shard.h5 >/dev/null || fail "after recomputing the missing part"

# 9. Bad input: one line each.
expect_error 2 "shards of 2 are numbered 0 to 1" "$EMBCACHE" precompute "${OPTS[@]}" --out bad.h5 --shard 3/2
expect_error 2 "SLURM_ARRAY_TASK_ID is not set" "$EMBCACHE" precompute "${OPTS[@]}" --out bad.h5 --shard slurm
expect_error 3 "different preprocessing" "$EMBCACHE" precompute "${OPTS[@]/0.286/0.3}" --out shard.h5 --shard 0/3
expect_error 3 "no such cache file" "$EMBCACHE" compact nothing.h5
echo "e2e_scale: ok"
