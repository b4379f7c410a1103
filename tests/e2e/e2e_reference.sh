#!/usr/bin/env bash
# Features written by the real binary equal the same TorchScript encoder run in Python on the
# same crops (max relative error <= 1e-6 in float32), for scripted, traced and dict encoders,
# every pixel dtype, band selection, normalisation and padding of small windows.
source "$(dirname "$0")/lib.sh"

check() {  # check NAME DATASET ENCODER [precompute options...] -- [compare options...]
  local name=$1 data=$2 enc=$3
  shift 3
  local pre=() cmp=()
  while [[ $# -gt 0 && $1 != "--" ]]; do pre+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  cmp=("$@")
  local batch=5 i
  for ((i = 0; i < ${#pre[@]}; i++)); do [[ ${pre[i]} == --batch-size ]] && batch=${pre[i + 1]}; done
  [[ " ${pre[*]} " == *" --batch-size "* ]] || pre+=(--batch-size "$batch")
  "$EMBCACHE" precompute --encoder "$ENC/$enc" --dataset "$data" --out "cache-$name.h5" --quiet --no-fsync "${pre[@]}"
  fx compare "cache-$name.h5" "$data" "$ENC/$enc" --batch-size "$batch" "${cmp[@]}"
}

fx dataset u8.h5 --n 6 --height 40 --width 48 --dtype uint8 --masks --splits --groups 2
fx dataset u16.h5 --n 3 --channels 4 --height 24 --width 20 --dtype uint16 --labels value
fx dataset i16.h5 --n 3 --height 16 --width 16 --dtype int16 --labels vector
fx dataset i32.h5 --n 2 --height 16 --width 16 --dtype int32 --labels none
fx dataset f32.h5 --n 3 --height 32 --width 32 --dtype float32
fx dataset small.h5 --n 2 --height 10 --width 12 --dtype uint8 --masks

check scripted u8.h5 multi_scripted.pt --crop-size 16 --overlap 4 --scale 0.00392 --mean 0.4,0.5,0.6 --std 0.2,0.25,0.3 \
  -- --crop-size 16 --overlap 4 --scale 0.00392 --mean 0.4,0.5,0.6 --std 0.2,0.25,0.3
check traced u8.h5 multi_traced.pt --crop-size 20x12 --overlap 3 --batch-size 7 --stage-priority normal -- --crop-size 20x12 --overlap 3
check dict u8.h5 dict_scripted.pt --crop-size 32 -- --crop-size 32
check u16 u16.h5 multi_scripted.pt --bands 3,0,1 --scale 0.0001 --mean 0.5 --std 0.25 \
  -- --bands 3,0,1 --scale 0.0001 --mean 0.5 --std 0.25
check i16 i16.h5 single_scripted.pt --scale 0.001 -- --scale 0.001
check i32 i32.h5 single_scripted.pt --scale 0.00001 --crop-size 8 --overlap 2 -- --scale 0.00001 --crop-size 8 --overlap 2
check f32 f32.h5 multi_scripted.pt -- 
check padded small.h5 multi_scripted.pt --crop-size 16 --pad-value 3 -- --crop-size 16 --pad-value 3
# A pad value uint8 cannot hold (nodata as -1) pads in float, as the reference does.
check padded-neg small.h5 multi_scripted.pt --crop-size 16 --pad-value -1 -- --crop-size 16 --pad-value -1

# float16 storage: equal to the float32 reference within half precision.
check half u8.h5 multi_scripted.pt --crop-size 16 --dtype float16 --compression gzip:4 -- --crop-size 16 --tolerance 2e-3
check bf16 u8.h5 multi_scripted.pt --crop-size 16 --dtype bfloat16 --compression lz4 -- --crop-size 16 --tolerance 1e-2

# A vision transformer (fixtures.py TinyViT: patch tokens of each block as maps, the class token as
# a vector), scripted and traced. With torch >= 2 (Debian 13) its attention is
# scaled_dot_product_attention, and the archives must call it; with 1.13 it is computed by hand.
fx dataset vit.h5 --n 3 --height 40 --width 48 --dtype uint8
check vit-scripted vit.h5 vit_scripted.pt --crop-size 32 --scale 0.00392 -- --crop-size 32 --scale 0.00392
check vit-traced vit.h5 vit_traced.pt --crop-size 32 --batch-size 4 -- --crop-size 32
"$PYTHON" - "$ENC" <<'PY'
import sys, zipfile, torch
enc = sys.argv[1]
attention = open(f"{enc}/vit_attention.txt").read().split()[0]
sdpa = int(torch.__version__.split(".")[0]) >= 2
assert attention == ("scaled_dot_product_attention" if sdpa else "eager"), (attention, torch.__version__)
for name in ["vit_scripted", "vit_traced"]:
    z = zipfile.ZipFile(f"{enc}/{name}.pt")
    code = b"".join(z.read(n) for n in z.namelist() if n.endswith(".py"))
    assert (b"torch.scaled_dot_product_attention(" in code) == sdpa, name
print(f"ok: the ViT fixtures' attention is {attention} (torch {torch.__version__})")
PY

# The padded crops' masks carry the ignore index past the window edge; labels follow crops.
"$PYTHON" - <<'PY'
import h5py, numpy as np
c = h5py.File("cache-padded.h5", "r")
d = h5py.File("small.h5", "r")
m = c["labels/mask"][:]
assert m.shape == (2, 16, 16), m.shape
assert c["labels/mask"].attrs["ignore_index"] == 255
assert (m[:, 10:, :] == 255).all() and (m[:, :, 12:] == 255).all()
assert np.array_equal(m[:, :10, :12], d["masks"][:].astype(np.int32))
assert list(c["index/bounds"][0]) == [0, 0, 16, 16]
u = h5py.File("cache-u16.h5", "r")
assert u["labels/value"].shape == (3,)
assert np.array_equal(u["labels/value"][:], h5py.File("u16.h5", "r")["labels"][:])
i = h5py.File("cache-i16.h5", "r")
assert i["labels/value"].shape == (3, 3)
s = h5py.File("cache-scripted.h5", "r")
assert sorted(set(x.decode() for x in s["index/split"][:])) == ["test", "train", "val"]
assert sorted(set(x.decode() for x in s["index/group"][:])) == ["g0", "g1"]
assert s.attrs["embcache_format"] == 1
assert s["levels/0"].attrs["stride"] == 2 and s["levels/1"].attrs["stride"] == 4
h = h5py.File("cache-half.h5", "r")
assert h["levels/0"].dtype == np.float16
b = h5py.File("cache-bf16.h5", "r")
assert b["levels/0"].astype("f4")[:].dtype == np.float32
print("ok: labels, masks, attributes")
PY

# inspect, text and JSON.
"$EMBCACHE" inspect cache-scripted.h5 >inspect.txt
grep -qE "splits \(crops / windows\): test=12/[0-9]+ train=48/[0-9]+ val=12/[0-9]+" inspect.txt || fail "inspect text: $(cat inspect.txt)"
grep -qF "preprocessing: scale 0.00392, mean [0.4 0.5 0.6], std [0.2 0.25 0.3]   bands: all   crops: 16x16, overlap 4" \
  inspect.txt || fail "inspect text: $(cat inspect.txt)"
grep -qE "^    0 +shape \[8,8,8\] +stride 2 " inspect.txt || fail "inspect text: $(cat inspect.txt)"
grep -qE "^    2 +shape \[[0-9]+\] +vector " inspect.txt || fail "inspect text: $(cat inspect.txt)"
"$EMBCACHE" inspect cache-traced.h5 | grep -qF "preprocessing: none (raw pixel values)   bands: all   crops: 20x12, overlap 3" ||
  fail "inspect text (traced)"
"$EMBCACHE" inspect cache-u16.h5 | grep -qF "bands: 3 0 1   crops: whole windows" || fail "inspect text (u16)"
"$EMBCACHE" inspect cache-scripted.h5 --json >inspect.json
"$PYTHON" - <<'PY'
import json
j = json.load(open("inspect.json"))
assert j["rows"] == 72 and j["splits"] == {"test": 12, "train": 48, "val": 12}, j
assert [l["name"] for l in j["levels"]] == ["0", "1", "2"]
assert j["levels"][0]["shape"] == [8, 8, 8]
print("ok: inspect --json")
PY
echo "e2e_reference: all checks passed"
