#!/usr/bin/python3
"""Real architectures for scripts/bench_encoders.sh: MobileNetV2, ResNet-50, ConvNeXt-T and
ViT-B/16 from Debian's python3-torchvision with random weights (seeded; weights do not change
the time of a forward call), traced with several taps, and a uint8 array dataset per input size.

Usage: export_torchvision.py OUT_DIR [--only NAME,...]
Writes OUT_DIR/NAME.pt (TorchScript returning a list of tapped tensors), OUT_DIR/data-SIZE.h5,
and prints one JSON line per model: name, input size, rows, the taps' shapes.
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torchvision


class Taps(nn.Module):
    """Runs `blocks` in order on the input and returns the outputs of the blocks in `taps`."""

    def __init__(self, stem, blocks, taps):
        super().__init__()
        self.stem = stem
        self.blocks = nn.ModuleList(blocks)
        self.taps = taps

    def forward(self, x):
        x = self.stem(x)
        out = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in self.taps:
                out.append(x)
        return out


class VitTaps(nn.Module):
    """ViT-B/16 token sequences after encoder layers `taps` (1-based), [B, 1 + N, 768] each."""

    def __init__(self, vit, taps):
        super().__init__()
        self.vit = vit
        self.taps = taps

    def forward(self, x):
        v = self.vit
        x = v._process_input(x)
        x = torch.cat([v.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = v.encoder.dropout(x + v.encoder.pos_embedding)
        out = []
        for i, layer in enumerate(v.encoder.layers):
            x = layer(x)
            if i + 1 in self.taps:
                out.append(x)
        return out


def models():
    tv = torchvision.models
    mobilenet = tv.mobilenet_v2(weights=None).features
    resnet = tv.resnet50(weights=None)
    convnext = tv.convnext_tiny(weights=None).features
    vit = tv.vit_b_16(weights=None, image_size=96)
    return {
        # The taps: after blocks 3, 6, 13 and 18 of `features` (0-based indices 3, 6, 13, 18).
        "mobilenet_v2": (Taps(nn.Identity(), list(mobilenet), {3, 6, 13, 18}), 96),
        "resnet50": (Taps(nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool),
                          [resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4], {0, 1, 2, 3}), 112),
        "convnext_tiny": (Taps(nn.Identity(), list(convnext), {1, 3, 5, 7}), 112),
        "vit_b_16": (VitTaps(vit, {3, 6, 9, 12}), 96),
    }


# Rows per model so that one precompute runs about 10 s on the 2-core build machine of stops 30-36
# (the short end of 10-30 s, so that 5 rounds of the benchmark fit in 15 minutes), in 4 batches of
# 64 or more. A faster machine runs them in less (stop 37's VM: MobileNetV2 4-5 s, ResNet-50 6-7 s);
# --rows name=N,... (bench_encoders.sh: ROWS=...) sets other counts, in multiples of 64.
ROWS = {"mobilenet_v2": 7680, "resnet50": 832, "convnext_tiny": 640, "vit_b_16": 256}


def rows_override(text):
    """{name: rows} from "name=N,name=N"; a clear error for an unknown name or a bad count."""
    rows = {}
    for item in filter(None, text.split(",")):
        name, _, count = item.partition("=")
        if name not in ROWS or not count.isdigit() or int(count) < 64 or int(count) % 64:
            raise SystemExit(f"export_torchvision: --rows {item!r}: want NAME=N with NAME one of "
                             f"{', '.join(ROWS)} and N a multiple of 64")
        rows[name] = int(count)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--only", default="")
    p.add_argument("--rows", default="", help="name=N,... rows for these models instead of ROWS")
    args = p.parse_args()
    rows_by_name = {**ROWS, **rows_override(args.rows)}
    os.makedirs(args.out_dir, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    torch.manual_seed(0)
    for name, (module, size) in models().items():
        if only and name not in only:
            continue
        module.eval()
        example = torch.zeros(2, 3, size, size)
        with torch.no_grad():
            traced = torch.jit.trace(module, example, check_trace=False)
            shapes = [list(t.shape[1:]) for t in traced(example)]
        path = os.path.join(args.out_dir, name + ".pt")
        traced.save(path)
        rows = rows_by_name[name]
        data = os.path.join(args.out_dir, f"data-{size}-{rows}.h5")
        if not os.path.exists(data):
            rng = np.random.default_rng(0)
            with h5py.File(data, "w") as f:
                f.create_dataset("images", data=rng.integers(0, 256, (rows, 3, size, size), dtype=np.uint8),
                                 chunks=(64, 3, size, size))
                f.create_dataset("labels", data=rng.integers(0, 10, rows, dtype=np.int64))
                f.create_dataset("splits", data=["train"] * rows, dtype=h5py.string_dtype("utf-8"))
        print(json.dumps({"name": name, "encoder": path, "dataset": data, "size": size, "rows": rows, "taps": shapes}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
