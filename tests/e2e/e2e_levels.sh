#!/usr/bin/env bash
# Encoders as foundation models are exported (docs/encoders.md): ViT tokens [B, N, D] become patch
# maps and a class token level equal to a Python reshape of the same outputs (bit for bit for an
# encoder whose tokens are copies of its input), scripted and traced; register tokens are
# dropped unless asked for; ambiguous and impossible token counts get one line naming the
# options that settle them; channels-last maps are turned; multi-temporal encoders get
# [B, T, C, h, w] from [N, T, C, H, W] datasets, their levels keep the time axis, and probes
# reduce it by --temporal-pool, head.pt too.
source "$(dirname "$0")/lib.sh"

fx dataset data.h5 --n 8 --height 32 --width 32 --splits >/dev/null
fx dataset series.h5 --n 8 --height 32 --width 32 --splits --time-steps 3 --dtype float32 >/dev/null
pre() { "$EMBCACHE" precompute --dataset "$1" --encoder "$ENC/$2" --out "$3" --quiet --no-fsync "${@:4}"; }

# 1. A ViT with a class token and 4 registers returning two blocks' tokens [B, 21, 32].
for kind in scripted traced; do
  pre data.h5 vit_registers_$kind.pt vit_$kind.h5 --crop-size 32
  fx compare vit_$kind.h5 data.h5 "$ENC/vit_registers_$kind.pt" --crop-size 32 --batch-size 8 --tolerance 1e-5 ||
    fail "ViT token levels ($kind) differ from Python's reshape"
done
"$PYTHON" - vit_scripted.h5 <<'PY' || fail "ViT levels and attributes"
import h5py, sys
with h5py.File(sys.argv[1]) as f:
    assert sorted(f["levels"]) == ["0", "0#cls", "1", "1#cls"], list(f["levels"])
    a = dict(f["levels/1"].attrs)
    assert f["levels/1"].shape[1:] == (32, 4, 4) and a["source"] == "patch_tokens" and a["patch_size"] == 8, a
    assert a["prefix_tokens"] == 5 and a["stride"] == 8 and a["source_output"] == "1", a
    c = dict(f["levels/1#cls"].attrs)
    assert f["levels/1#cls"].shape[1:] == (32,) and c["source"] == "class_token" and c["token"] == 0, c
    assert f.attrs["embcache_format"] == 2
print("ok: patch maps [32, 4, 4] and class tokens [32], format 2")
PY
"$EMBCACHE" inspect vit_scripted.h5 >inspect.txt
grep -q "0#cls .*class token of output 0" inspect.txt || fail "inspect: $(cat inspect.txt)"
grep -q "patch tokens of output 1 (patch 8, 5 prefix tokens)" inspect.txt || fail "inspect: $(cat inspect.txt)"

# 2. Bit for bit: tokens that are copies of the input, registers kept.
pre data.h5 patch_copy.pt copy.h5 --crop-size 16 --keep-prefix-tokens
fx compare copy.h5 data.h5 "$ENC/patch_copy.pt" --crop-size 16 --batch-size 64 --tolerance 0 ||
  fail "patch maps are not the Python reshape bit for bit"
"$PYTHON" -c 'import h5py, sys; n = sorted(h5py.File(sys.argv[1])["levels"]); assert n == ["tokens", "tokens#cls", "tokens#prefix1", "tokens#prefix2", "tokens#prefix3", "tokens#prefix4"], n' copy.h5 ||
  fail "--keep-prefix-tokens"

# 3. Token counts that fit no grid, or more than one; the options that settle them.
expect_error 3 "has 13 tokens for 32x32 crops, which fits no patch grid" pre data.h5 bad_tokens.pt bad.h5 --crop-size 32
expect_error 3 "fits more than one patch grid .0 prefix tokens + 4x4 patches of 3 px; 7 prefix tokens + 3x3 patches of 4 px.; pass --patch-size P or --prefix-tokens K" \
  pre data.h5 ambiguous_tokens.pt amb.h5 --crop-size 12
pre data.h5 ambiguous_tokens.pt amb3.h5 --crop-size 12 --patch-size 3
pre data.h5 ambiguous_tokens.pt amb7.h5 --crop-size 12 --prefix-tokens 7
"$PYTHON" -c 'import h5py, sys; a, b = (h5py.File(p) for p in sys.argv[1:]); assert a["levels/0"].shape[1:] == (3, 4, 4) and "0#cls" not in a["levels"]; assert b["levels/0"].shape[1:] == (3, 3, 3) and "0#cls" in b["levels"]' amb3.h5 amb7.h5 ||
  fail "--patch-size / --prefix-tokens did not settle the grid"
expect_error 2 "--patch-size: 5 does not cut the 12x12 crops" pre data.h5 ambiguous_tokens.pt amb5.h5 --crop-size 12 --patch-size 5
expect_error 2 "--prefix-tokens: expected N or OUTPUT=N" pre data.h5 ambiguous_tokens.pt ambx.h5 --crop-size 12 --prefix-tokens =3
[[ ! -e bad.h5 && ! -e amb.h5 && ! -e amb5.h5 ]] || fail "a refused run left a cache"

# 4. Channels-last maps.
pre data.h5 channels_last.pt cl.h5 --crop-size 16 --channels-last 0
fx compare cl.h5 data.h5 "$ENC/channels_last.pt" --crop-size 16 --batch-size 64 --tolerance 0 || fail "channels-last"
"$PYTHON" -c 'import h5py, sys; f = h5py.File(sys.argv[1]); assert f["levels/0"].shape[1:] == f["levels/1"].shape[1:] == (6, 8, 8)' cl.h5 ||
  fail "channels-last shape"
expect_error 2 "--channels-last: the encoder has no output \"3\"" pre data.h5 channels_last.pt cl3.h5 --crop-size 16 --channels-last 3
expect_error 2 "--channels-last: output 0 is .2, 21, 32.; it names 4-D outputs" pre data.h5 vit_registers_scripted.pt clv.h5 --crop-size 32 --channels-last 0 --batch-size 2

# 5. Multi-temporal: [N, T, C, H, W] in, maps [T, C, H, W] and Prithvi-style tokens out.
for kind in scripted traced; do
  pre series.h5 temporal_$kind.pt series_$kind.h5 --crop-size 32 --mean 0.1,0.2,0.3 --std 2
  fx compare series_$kind.h5 series.h5 "$ENC/temporal_$kind.pt" --crop-size 32 --batch-size 8 --mean 0.1,0.2,0.3 --std 2 \
    --tolerance 1e-5 || fail "temporal levels ($kind)"
done
"$PYTHON" - series_scripted.h5 <<'PY' || fail "temporal levels"
import h5py, sys
with h5py.File(sys.argv[1]) as f:
    shapes = {n: f["levels"][n].shape[1:] for n in f["levels"]}
    assert shapes == {"0": (3, 4, 16, 16), "1": (3, 8, 4, 4), "1#cls": (8,), "2": (4,)}, shapes
    assert f["levels/0"].attrs["time_steps"] == 3 and f["levels/1"].attrs["time_steps"] == 3
print("ok: temporal maps [3, 4, 16, 16], temporal patch tokens [3, 8, 4, 4]")
PY
expect_error 2 "--time-axis: data.h5 has no time axis" pre data.h5 temporal_scripted.pt t.h5 --crop-size 32 --time-axis

# 6. Probes reduce time before any head, inside head.pt too.
for run in mean:linear max:conv last:conv max_linear:linear; do
  pool=${run%%:*}
  "$EMBCACHE" train-probe --cache series_scripted.h5 --out probe_$pool --task classification --levels 0 \
    --head ${run#*:} --epochs 3 --temporal-pool ${pool%_linear} --quiet >/dev/null
done
"$EMBCACHE" train-probe --cache series_scripted.h5 --out probe_tokens --task classification --levels 1,1#cls,2,1+2 \
  --head linear --epochs 3 --quiet >/dev/null
"$PYTHON" - <<'PY' || fail "head.pt does not reduce time as training did"
import h5py, json, torch
f = h5py.File("series_scripted.h5")
x = torch.from_numpy(f["levels/0"][:])
reduce = {"mean": lambda t: t.mean(1), "max": lambda t: t.amax(1), "last": lambda t: t[:, -1]}
for run in ["mean", "max", "last", "max_linear"]:
    pool = run.replace("_linear", "")
    r = reduce[pool]
    head = torch.jit.load(f"probe_{run}/head.pt")
    m = json.load(open(f"probe_{run}/metrics.json"))
    assert m["options"]["temporal_pool"] == pool
    # What the feed gave the head in training: maps reduced over time, or for pooled heads
    # (linear) the spatial mean first, then time.
    fed = r(x) if m["best"]["head"] == "conv" else r(x.mean((3, 4)))
    a, b = head([x]), head([fed])
    assert torch.allclose(a, b, atol=1e-5), (pool, float((a - b).abs().max()))
    print(f"ok: head.pt ({m['best']['head']}) on [N, T, C, H, W] equals it on the features reduced by {pool} over time")
PY
expect_error 2 "--temporal-pool: expected mean, max or last" "$EMBCACHE" train-probe --cache series_scripted.h5 --out p \
  --task classification --levels 0 --temporal-pool median

# --optimize: a frozen, optimised ViT and Conv-BN encoder give Python's plain outputs within 1e-5
# (relative to each level's largest value); inspect says so, with what precompute measured.
pre data.h5 vit_registers_scripted.pt vit_opt.h5 --crop-size 32 --optimize
fx compare vit_opt.h5 data.h5 "$ENC/vit_registers_scripted.pt" --crop-size 32 --batch-size 8 --tolerance 1e-5 ||
  fail "--optimize: ViT levels differ from the plain encoder's in Python"
pre data.h5 conv_bn.pt bn_opt.h5 --crop-size 16 --optimize
fx compare bn_opt.h5 data.h5 "$ENC/conv_bn.pt" --crop-size 16 --batch-size 64 --tolerance 1e-5 ||
  fail "--optimize: Conv-BN levels differ from the plain encoder's in Python"
"$EMBCACHE" inspect bn_opt.h5 >inspect.txt
grep -Eq "computed with: cpu, torch .*, amp none, optimised \(outputs within ([0-9.]+e-(0[6-9]|[1-9][0-9])|0\.0e\+00) of the plain encoder's, relative\)" inspect.txt ||
  fail "inspect does not show --optimize: $(cat inspect.txt)"
echo "ok: token, channels-last and temporal levels; --optimize within 1e-5"
