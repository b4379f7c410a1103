#!/usr/bin/env bash
# Upgrades cost users nothing. The identity texts behind a study's run ids and the signature of a
# cache are written out below as embcache computed them before options became typed plans: a
# refactor that changes either would retrain finished runs or refuse existing caches. And a
# study's numbers keep every digit: the same options from the CLI and from a study give one
# signature and share one cache.
source "$(dirname "$0")/lib.sh"
: "${DEMO_DATA_PY:?run through ctest}"

# 1. Run ids: SHA-256 over the resolved options and the cache identity (docs/run.md). Dummy
#    encoder and dataset files are enough for a dry run.
mkdir golden
touch golden/enc.pt golden/data.h5
cat >golden/study.json <<'JSON'
{
  "version": 1,
  "output_dir": "out",
  "precompute": [ { "name": "enc", "encoder": "enc.pt", "dataset": "data.h5", "crop_size": 32, "overlap": 4,
                    "scale": 0.0001, "mean": [0.286, 1370.5], "std": [0.353, 2], "dtype": "float16" } ],
  "probes": [
    { "name": "sweep", "cache": "enc", "task": "classification", "levels": [[0], [1, 2]], "lr": [1e-3, 0.01],
      "weight_decay": 1e-4, "epochs": 4 }
  ]
}
JSON
"$EMBCACHE" run golden/study.json --dry-run >plan.txt
"$PYTHON" - "$WORK/golden" plan.txt <<'PY' || fail "run ids changed: finished study runs would train again"
import hashlib, json, re, sys
d, plan = sys.argv[1], open(sys.argv[2]).read()
# The precompute entry's identity: its options in --help order, as option text.
pre = [("encoder", d + "/enc.pt"), ("dataset", d + "/data.h5"), ("format", "auto"), ("layers", ""), ("groups", ""),
       ("window_names", ""), ("tags", ""), ("split_key", "split"), ("label_layer", ""), ("label_property", ""),
       ("label_type", "auto"), ("classes", ""), ("reader_threads", 2), ("out", d + "/out/caches/enc.h5"),
       ("crop_size", "32"), ("overlap", 4), ("pad_value", 0.0), ("levels", ""), ("bands", ""), ("scale", 0.0001),
       ("mean", "0.286,1370.5"), ("std", "0.353,2"), ("batch_size", "auto"), ("device", "auto"), ("threads", 0),
       ("amp", "none"), ("dtype", "float16"), ("compression", "none"), ("overwrite", False),
       ("allow_nonfinite", False), ("commit_seconds", 30.0), ("segment_mb", 1024), ("no_fsync", True),
       ("stage_priority", "auto")]
identity = json.dumps(dict(pre), separators=(",", ":"))
def run_id(levels, lr):
    o = {"task": "classification", "head": "linear", "levels": levels, "num_classes": 0, "hidden": "", "dropout": 0.1,
         "conv_blocks": 2, "optimizer": "adamw", "lr": lr, "weight_decay": "0.0001", "epochs": 4, "batch_size": 256,
         "schedule": "cosine", "warmup_epochs": 0.0, "seed": 0, "patience": 0, "label_smoothing": 0.0,
         "standardize": "auto", "train_split": "train", "val_split": "val", "test_split": "test", "val_fraction": 0.0,
         "device": "auto", "threads": 0, "tier": "auto", "gpu_memory_budget": "auto", "host_memory_budget": "auto",
         "bootstrap": 0, "cache": [d + "/out/caches/enc.h5"], "cache_identity": identity}
    return hashlib.sha256(json.dumps(o, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
for levels, lr in [("0", "0.001"), ("0", "0.01"), ("1+2", "0.001"), ("1+2", "0.01")]:
    line = "  %s  sweep/levels=%s,lr=%s" % (run_id(levels, lr), levels, lr)
    assert line in plan, (line, plan)
print("ok: the 4 run ids of the golden study are unchanged")
PY

# 2. A cache's signature, as the CLI made it before, with --no-optimize and by default: the demo
#    encoder has no batch norm, so the default leaves it as loaded (a new cache of an encoder with
#    batch norms gets one more compared field, encoder_optimization: tests/unit).
mkdir data
"$PYTHON" "$DEMO_DATA_PY" data --train 60 --val 20 --test 20 >/dev/null
for cache in cli cli-plain; do
  "$EMBCACHE" precompute --encoder data/demo_encoder.pt --dataset data/fashion_mnist.h5 --out $cache.h5 --scale 0.0001 \
    --mean 1370.19151926 --std 2.5 --crop-size 20 --overlap 2 --quiet $([[ $cache == cli-plain ]] && echo --no-optimize) >/dev/null
  "$EMBCACHE" inspect $cache.h5 --json >$cache.json
done
"$PYTHON" - "$WORK" cli-plain.json cli.json <<'PY' || fail "the cache signature changed: existing caches would be refused"
import hashlib, json, sys
d, plain, default = sys.argv[1], json.load(open(sys.argv[2]))["signature"], json.load(open(sys.argv[3]))["signature"]
want = {"bands": [], "crop_size": [20, 20], "dataset_path": d + "/data/fashion_mnist.h5", "dtype": "float32",
        "embcache_version": "0.1.0", "encoder_path": d + "/data/demo_encoder.pt",
        "encoder_sha256": hashlib.sha256(open(d + "/data/demo_encoder.pt", "rb").read()).hexdigest(), "format": 1,
        "labels": {"class": True}, "levels": ["0", "1", "2"], "levels_requested": "all", "overlap": 2,
        "pad_value": 0.0, "preprocessing": {"mean": [1370.19151926], "scale": 0.0001, "std": [2.5]}}
# computed_with (where and how the rows were computed) is informational, like embcache_version:
# it never decides whether a cache may be extended, so caches without it stay extendable.
computed = plain.pop("computed_with")
assert set(computed) == {"device", "torch", "amp", "shard"} and computed["shard"] == "0/1", computed
assert plain == want, (plain, want)
computed = default.pop("computed_with")
assert set(computed) == {"device", "torch", "amp", "shard"}, computed
assert default == want, (default, want)
print("ok: the signature of a CLI cache is unchanged and keeps every digit of --mean, by default and with --no-optimize")
PY

# 3. The same options from a study: the study finds the CLI's cache complete and computes nothing.
cat >study.json <<'JSON'
{
  "version": 1,
  "output_dir": "out",
  "precompute": [ { "name": "enc", "encoder": "data/demo_encoder.pt", "dataset": "data/fashion_mnist.h5",
                    "out": "cli.h5", "scale": 0.0001, "mean": [1370.19151926], "std": [2.5],
                    "crop_size": 20, "overlap": 2 } ]
}
JSON
"$EMBCACHE" run study.json >study.txt 2>&1 || fail "study on the CLI's cache: $(cat study.txt)"
grep -q "(0 computed, 400 cached, 0 stale)" study.txt || fail "the study did not reuse the CLI's cache: $(cat study.txt)"
"$EMBCACHE" inspect cli.h5 --json >after.json
"$PYTHON" -c 'import json, sys; a, b = (json.load(open(f))["signature"] for f in sys.argv[1:]); assert a == b, (a, b)' \
  cli.json after.json || fail "the study changed the cache's signature"
echo "ok: a study with the CLI's options (mean 1370.19151926) reuses the CLI's cache"

# 4. A cache written by the build before format 2 (tests/data/format1, made by 18fb7f3) reads,
#    trains and extends: the rerun computes only the two new windows and writes only them, as a
#    second part, with the plain encoder it was made with (as a cache keeps at the default). CACHE.h5 becomes a view (format 3) whose first part is the old file itself, still
#    format 1; the signature is the old one but for informational fields. `embcache compact` makes
#    it one format 1 file again, for builds that read only formats 1 and 2.
: "${TEST_DATA:?run through ctest}"
cp "$TEST_DATA/format1/encoder.pt" "$TEST_DATA/format1/cache.h5" .
"$PYTHON" - "$TEST_DATA/format1/data.h5" <<'PY'
import h5py, numpy as np, sys
with h5py.File(sys.argv[1]) as src, h5py.File("data.h5", "w") as dst:
    rng = np.random.default_rng(1)
    dst["images"] = np.concatenate([src["images"][:], rng.integers(0, 256, (2, 3, 16, 16), dtype=np.uint8)])
    dst["labels"] = np.concatenate([src["labels"][:], [1, 2]])
    text = h5py.string_dtype("utf-8")
    for k, extra in (("names", ["new0", "new1"]), ("splits", ["train", "test"])):
        dst.create_dataset(k, data=src[k].asstr()[:].tolist() + extra, dtype=text)
PY
"$EMBCACHE" inspect cache.h5 --json >v1.json
"$EMBCACHE" train-probe --cache cache.h5 --out v1probe --task classification --levels 1,2 --epochs 2 --quiet >/dev/null ||
  fail "train-probe on a format 1 cache"
# Paths are informational: the copies here extend the cache made from the committed files.
"$EMBCACHE" precompute --encoder encoder.pt --dataset data.h5 --out cache.h5 --crop-size 16 --batch-size 4 --dtype float16 \
  --quiet --no-fsync >extend.txt 2>&1 || fail "extending a format 1 cache: $(cat extend.txt)"
grep -q "(2 computed, 6 cached, 0 stale)" extend.txt || fail "the format 1 cache was not extended: $(cat extend.txt)"
"$EMBCACHE" inspect cache.h5 --json >v1-extended.json
"$EMBCACHE" compact cache.h5 --quiet
"$EMBCACHE" inspect cache.h5 --json >v1-compacted.json
"$PYTHON" - v1.json v1-extended.json v1-compacted.json <<'PY' || fail "extending a format 1 cache changed its signature"
import h5py, json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:])
assert a["format"] == 1 and b["format"] == 3 and c["format"] == 1, (a["format"], b["format"], c["format"])
assert [p["rows"] for p in b["parts"]] == [6, 2], b["parts"]
sa, sb = a["signature"], b["signature"]
for s in (sa, sb):
    for k in ("embcache_version", "dataset_path", "encoder_path", "computed_with"):  # informational
        s.pop(k, None)
assert sa == sb, (sa, sb)
assert b["rows"] == c["rows"] == 8 and [l["source"] for l in b["levels"]] == ["map", "map", "vector"], b["levels"]
PY
expect_error 3 "made with a different dtype" "$EMBCACHE" precompute --encoder encoder.pt --dataset data.h5 --out cache.h5 \
  --crop-size 16 --dtype int8 --quiet
echo "ok: a format 1 cache reads, trains and extends, and stays format 1"
