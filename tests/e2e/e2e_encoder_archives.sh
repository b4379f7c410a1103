#!/usr/bin/env bash
# Encoders saved by a newer torch than this build's LibTorch. tests/data/vit_sdpa_torch2.6.pt was
# saved by torch 2.6 and calls aten::scaled_dot_product_attention (torch >= 2.0). A LibTorch that
# has the operator runs it and matches Python's torch on the same crops; an older one (Debian 12's
# 1.13) refuses it in one line naming the operator, the archive's producer facts, its own version
# and what to do, and writes nothing.
source "$(dirname "$0")/lib.sh"
ARCHIVE=${TEST_DATA:?}/vit_sdpa_torch2.6.pt

"$EMBCACHE" --version >version.txt
libtorch=$(sed -n 's/^LibTorch \([0-9][0-9.]*\).*/\1/p' version.txt)
[[ -n $libtorch ]] || fail "no LibTorch version in --version: $(cat version.txt)"
fx dataset data.h5 --n 3 --height 40 --width 48 --dtype uint8

if [[ ${libtorch%%.*} -ge 2 ]]; then
  "$EMBCACHE" precompute --encoder "$ARCHIVE" --dataset data.h5 --out c.h5 --crop-size 32 --scale 0.00392 \
    --batch-size 4 --quiet --no-fsync
  fx compare c.h5 data.h5 "$ARCHIVE" --crop-size 32 --scale 0.00392 --batch-size 4
  echo "ok: LibTorch $libtorch runs an encoder torch 2.6 saved with scaled_dot_product_attention"
else
  expect_error 3 "calls aten::scaled_dot_product_attention, which this build's LibTorch $libtorch does not have" \
    "$EMBCACHE" precompute --encoder "$ARCHIVE" --dataset data.h5 --out c.h5 --crop-size 32 --quiet
  for part in "(torch has it since 2.0)" "TorchScript file format 10" "written by torch 2.1 or later" \
    "Build embcache against a LibTorch at least as new" "docs/install.md" "fused_attn=False" \
    'attn_implementation="eager"'; do
    grep -qF -- "$part" "$WORK/err.txt" || fail "the error lacks '$part': $(cat "$WORK/err.txt")"
  done
  [[ ! -e c.h5 ]] || fail "a refused encoder left c.h5 behind"
fi
