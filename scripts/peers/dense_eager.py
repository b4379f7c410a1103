#!/usr/bin/python3
"""The eager-PyTorch yardstick for embcache's dense heads (scripts/bench_probe.sh, section 6): the
same architecture as `train-probe --head conv|fpn|unet|upernet` (GroupNorm with 8 groups where
embcache's blocks have it, docs/train-probe.md), the same batch size, optimizer and schedule as
train-probe's defaults (AdamW, betas 0.9/0.999, weight decay 0, cosine), trained the way a user
would write it: the train split's features in memory as float32, a random permutation per
epoch, cross-entropy with the ignore index.

Usage: dense_eager.py CACHE.h5 --head conv --levels 1 [--width 128] [--batch 64] [--epochs 2]
                      [--lrs 1e-3] [--threads 0] [--train-fraction 1] [--device auto]
On a GPU (--device cuda, or auto where one is visible) the features and masks are copied to it
once before training, as train-probe's GPU tier holds them, and each epoch's clock stops after the
device has finished its work.
Prints one JSON object: per learning rate the seconds of each epoch, and their mean, and
`grid_seconds_per_epoch` (all learning rates, one after another, as a plain loop trains a grid).
"""
import argparse
import json
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def up(t, size):
    return F.interpolate(t, size=size, mode="bilinear", align_corners=False)


def block(cin, cout, k=3):
    groups = 8 if cout % 8 == 0 else 1
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2), nn.GroupNorm(groups, cout), nn.ReLU())


class Conv(nn.Module):
    def __init__(self, channels, width, classes, blocks=2):
        super().__init__()
        self.body = nn.Sequential(*[block(channels[0] if i == 0 else width, width) for i in range(blocks)])
        self.out = nn.Conv2d(width, classes, 1)

    def forward(self, feats, size):
        return up(self.out(self.body(feats[0])), size)


class Fpn(nn.Module):  # feats finest first
    def __init__(self, channels, width, classes):
        super().__init__()
        self.laterals = nn.ModuleList([nn.Conv2d(c, width, 1) for c in channels])
        self.smooth = nn.Conv2d(width, width, 3, padding=1)
        self.out = nn.Conv2d(width, classes, 1)

    def forward(self, feats, size):
        p = [l(f) for l, f in zip(self.laterals, feats)]
        for j in range(len(p) - 2, -1, -1):
            p[j] = p[j] + F.interpolate(p[j + 1], size=p[j].shape[2:], mode="nearest")
        return up(self.out(torch.relu(self.smooth(p[0]))), size)


class Unet(nn.Module):  # feats finest first
    def __init__(self, channels, width, classes):
        super().__init__()
        blocks, cin = [], channels[-1]
        for c in reversed(channels[:-1]):
            blocks.append(block(cin + c, width))
            cin = width
        self.blocks = nn.ModuleList(blocks)
        self.out = nn.Conv2d(cin, classes, 1)

    def forward(self, feats, size):
        x = feats[-1]
        for b, f in zip(self.blocks, reversed(feats[:-1])):
            x = b(torch.cat([up(x, f.shape[2:]), f], 1))
        return up(self.out(x), size)


class Upernet(nn.Module):  # mmsegmentation's UPerHead with GroupNorm, as embcache's
    def __init__(self, channels, width, classes):
        super().__init__()
        self.ppm = nn.ModuleList([block(channels[-1], width, 1) for _ in (1, 2, 3, 6)])
        self.bottleneck = block(channels[-1] + 4 * width, width)
        self.laterals = nn.ModuleList([block(c, width, 1) for c in channels[:-1]])
        self.fpn = nn.ModuleList([block(width, width) for _ in channels[:-1]])
        self.fuse = block(len(channels) * width, width)
        self.out = nn.Conv2d(width, classes, 1)

    def forward(self, feats, size):
        x = feats[-1]
        top = self.bottleneck(torch.cat([x] + [up(b(F.adaptive_avg_pool2d(x, s)), x.shape[2:])
                                              for s, b in zip((1, 2, 3, 6), self.ppm)], 1))
        lat = [l(f) for l, f in zip(self.laterals, feats[:-1])] + [top]
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + up(lat[i], lat[i - 1].shape[2:])
        outs = [f(l) for f, l in zip(self.fpn, lat[:-1])] + [lat[-1]]
        outs = [outs[0]] + [up(o, outs[0].shape[2:]) for o in outs[1:]]
        return up(self.out(self.fuse(torch.cat(outs, 1))), size)


HEADS = {"conv": Conv, "fpn": Fpn, "unet": Unet, "upernet": Upernet}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cache")
    p.add_argument("--head", choices=sorted(HEADS), required=True)
    p.add_argument("--levels", required=True, help="1 or 0+1, as train-probe's --levels")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lrs", default="1e-3")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--train-fraction", type=float, default=1.0)
    p.add_argument("--device", default="auto", help="auto (cuda when one is visible), cpu, cuda or cuda:N")
    args = p.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    with h5py.File(args.cache, "r") as f:
        train = np.flatnonzero(f["index/split"].asstr()[:] == "train")
        train = train[: int(round(len(train) * args.train_fraction))]
        feats = [torch.from_numpy(f["levels/" + l][:][train].astype(np.float32)) for l in args.levels.split("+")]
        y = torch.from_numpy(f["labels/mask"][:][train].astype(np.int64))
        ignore = int(f["labels/mask"].attrs.get("ignore_index", -100))
    feats.sort(key=lambda t: -t.shape[2] * t.shape[3])  # finest first
    feats, y = [t.to(device) for t in feats], y.to(device)
    classes = int(y[y != ignore].max()) + 1
    size = tuple(y.shape[1:])
    out = {"head": args.head, "levels": args.levels, "width": args.width, "batch": args.batch,
           "rows": len(y), "threads": torch.get_num_threads(), "device": str(device), "lrs": []}
    grid = 0.0
    for lr in [float(v) for v in args.lrs.split(",")]:
        torch.manual_seed(0)
        model = HEADS[args.head]([t.shape[1] for t in feats], args.width, classes).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        steps = args.epochs * ((len(y) + args.batch - 1) // args.batch)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        seconds = []
        for _ in range(args.epochs):
            t0 = time.perf_counter()
            model.train()
            for idx in torch.randperm(len(y), device=device).split(args.batch):
                loss = F.cross_entropy(model([t[idx] for t in feats], size), y[idx], ignore_index=ignore)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                schedule.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds.append(time.perf_counter() - t0)
        grid += sum(seconds) / len(seconds)
        out["lrs"].append({"lr": lr, "epoch_seconds": seconds, "seconds_per_epoch": sum(seconds) / len(seconds)})
    out["grid_seconds_per_epoch"] = grid
    print(json.dumps(out))


if __name__ == "__main__":
    main()
