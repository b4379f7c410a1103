#!/usr/bin/python3
"""Real architectures for scripts/bench_encoders.sh: MobileNetV2, ResNet-50, ConvNeXt-T and
ViT-B/16 from Debian's python3-torchvision with random weights (seeded; weights do not change
the time of a forward call) and batch norm statistics set from random images (so that the
outputs have a trained network's scale, which their conversion's time can depend on), traced
with several taps, and a uint8 array dataset per input size.

Usage: export_torchvision.py OUT_DIR [--only NAME,...] [--rows NAME=N,...] [--seconds S]
    [--threads T] [--device cpu|cuda] [--optimize]
Writes OUT_DIR/NAME.pt (TorchScript returning a list of tapped tensors), OUT_DIR/data-SIZE-ROWS.h5,
and prints one JSON line per model: name, input size, rows, the taps' shapes, and (calibrated
models) the measured seconds per batch of 64.

Rows: by default each model gets the rows that its encoder takes about S seconds over (default
10) at T threads on this machine, timed here on a few batches of 64 of the module as precompute
runs it out of the box (as loaded, with no TorchScript fusion on the CPU; --optimize: frozen and
optimised for inference, as precompute --optimize runs it). Runs of 10-30 s measure the
encoder's steady state; a count fixed for one machine would run half as long on the next one. --rows sets a model's count instead
(multiples of 64).
"""
import argparse
import json
import math
import os
import sys
import time

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


NAMES = ("mobilenet_v2", "resnet50", "convnext_tiny", "vit_b_16")
BATCH = 64
MIN_BATCHES = 4


def calibrate_batch_norms(module, size):
    """Sets each batch norm's statistics from two batches of random images, as training leaves
    them matched to the activations they normalise. With torchvision's initialisation and no
    training they stay at mean 0 and variance 1, and MobileNetV2's depthwise convolutions shrink
    the activations block by block: levels 2 and 3 came out at 5e-6 and 4e-9, below float16's
    normal range. Values do not change a forward call's time, but they do change what the
    outputs cost to convert: numpy's float16 cast of those took 15 s of the 37-s script on
    Debian 12, against 0.1 s for values at a trained network's scale."""
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the batches
    module.train()
    with torch.no_grad():
        for _ in range(2):
            module(torch.rand(32, 3, size, size))
    module.eval()


def rows_override(text):
    """{name: rows} from "name=N,name=N"; a clear error for an unknown name or a bad count."""
    rows = {}
    for item in filter(None, text.split(",")):
        name, _, count = item.partition("=")
        if name not in NAMES or not count.isdigit() or int(count) < 64 or int(count) % 64:
            raise SystemExit(f"export_torchvision: --rows {item!r}: want NAME=N with NAME one of "
                             f"{', '.join(NAMES)} and N a multiple of 64")
        rows[name] = int(count)
    return rows


def as_precompute_runs_it(traced, optimize):
    """The module as precompute runs it: as loaded by default, frozen and optimised for inference
    under --optimize (docs/precompute.md)."""
    return torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval())) if optimize else traced


def seconds_per_batch(traced, size, device, optimize):
    """Seconds of the fastest forward call on a batch of 64 random images: two warm-up calls (the
    TorchScript executor profiles the graph in the first and optimises it in the second, and the
    heap grows to its peak), then at least two timed calls and at least a second of them. The
    fastest, not the median: rows counted from a slow moment made runs shorter than asked (Debian
    13, MobileNetV2 timed at 129 ms a batch, ran 98-123 ms a batch in the table, so its runs took
    7.9-9.6 s where 10 were asked)."""
    module = as_precompute_runs_it(traced, optimize)
    x = torch.rand(BATCH, 3, size, size, device=device)
    times = []
    with torch.inference_mode():
        while len(times) < 4 or sum(times[2:]) < 1.0:
            start = time.perf_counter()
            module(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    return min(times[2:])


def calibrated_rows(per_batch, seconds):
    return BATCH * max(MIN_BATCHES, math.ceil(seconds / per_batch))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--only", default="")
    p.add_argument("--rows", default="", help="name=N,... rows for these models instead of calibrated ones")
    p.add_argument("--seconds", type=float, default=10.0, help="encoder seconds a calibrated model's rows take")
    p.add_argument("--threads", type=int, default=2, help="threads to time the calibration at")
    p.add_argument("--device", default="cpu")
    p.add_argument("--optimize", action="store_true", help="time the module as precompute --optimize runs it")
    args = p.parse_args()
    rows_by_name = rows_override(args.rows)
    torch.set_num_threads(args.threads)
    # As embcache and encoder_loop.py run it. Debian 13's torch 2.6 turns the TensorExpr fuser on
    # for the CPU, and there ViT-B/16's timing calls never returned (one thread busy in
    # libtorch_cpu for 9 minutes, before it was stopped).
    torch._C._jit_override_can_fuse_on_cpu(False)
    device = torch.device(args.device)
    os.makedirs(args.out_dir, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    torch.manual_seed(0)
    for name, (module, size) in models().items():
        if only and name not in only:
            continue
        calibrate_batch_norms(module, size)
        # Traced in eval mode: torchvision builds models in training mode, and a trace keeps what
        # ran: ConvNeXt-T traced that way keeps its stochastic depth (a random mask per crop on
        # every call), so its features would differ from run to run.
        module.eval()
        example = torch.zeros(2, 3, size, size)
        with torch.no_grad():
            traced = torch.jit.trace(module, example, check_trace=False)
            shapes = [list(t.shape[1:]) for t in traced(example)]
        path = os.path.join(args.out_dir, name + ".pt")
        traced.save(path)
        record = {}
        rows = rows_by_name.get(name)
        if rows is None:
            per_batch = seconds_per_batch(traced.to(device), size, device, args.optimize)
            rows = calibrated_rows(per_batch, args.seconds)
            record = {"seconds_per_batch": round(per_batch, 4)}
        data = os.path.join(args.out_dir, f"data-{size}-{rows}.h5")
        if not os.path.exists(data):
            rng = np.random.default_rng(0)
            with h5py.File(data, "w") as f:
                f.create_dataset("images", data=rng.integers(0, 256, (rows, 3, size, size), dtype=np.uint8),
                                 chunks=(64, 3, size, size))
                f.create_dataset("labels", data=rng.integers(0, 10, rows, dtype=np.int64))
                f.create_dataset("splits", data=["train"] * rows, dtype=h5py.string_dtype("utf-8"))
        print(json.dumps({"name": name, "encoder": path, "dataset": data, "size": size, "rows": rows, "taps": shapes,
                          **record}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
