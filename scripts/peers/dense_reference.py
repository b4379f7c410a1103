#!/usr/bin/python3
"""The yardstick for embcache's dense-head defaults: an ordinary eager PyTorch run of the conv
head (two 3x3 conv + norm + ReLU blocks, a 1x1 prediction, bilinear upsampling to the mask) on
features read from an embcache cache with h5py, over a grid of learning rates. Each learning
rate is picked at its best validation epoch; the best learning rate by validation reports its
test mIoU (mean IoU over the classes present in the target or the prediction, ignore-index
pixels left out, as embcache computes it).

Usage: dense_reference.py CACHE.h5 --level 1 [--epochs 20] [--lr 1e-3,3e-3,1e-2] [--batch 64]
                          [--norm batch|group] [--optimizer adam|adamw] [--width 128]
Prints one JSON object: per lr the best epoch, val and test mIoU, and the seconds per epoch.
"""
import argparse
import json
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load(path, level):
    with h5py.File(path, "r") as f:
        split = f["index/split"].asstr()[:]
        x = torch.from_numpy(f["levels/" + level][:].astype(np.float32))
        y = torch.from_numpy(f["labels/mask"][:].astype(np.int64))
        ignore = int(f["labels/mask"].attrs.get("ignore_index", -1))
    parts = {s: torch.from_numpy(np.flatnonzero(split == s)) for s in ("train", "val", "test")}
    return {s: (x[i], y[i]) for s, i in parts.items()}, ignore


class ConvHead(nn.Module):
    def __init__(self, cin, width, classes, out_size, norm):
        super().__init__()
        layers = []
        for i in range(2):
            layers += [nn.Conv2d(cin if i == 0 else width, width, 3, padding=1),
                       nn.BatchNorm2d(width) if norm == "batch" else nn.GroupNorm(8, width), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.out = nn.Conv2d(width, classes, 1)
        self.out_size = out_size

    def forward(self, x):
        return F.interpolate(self.out(self.body(x)), size=self.out_size, mode="bilinear", align_corners=False)


def miou(model, x, y, classes, ignore, batch=512):
    conf = torch.zeros(classes, classes, dtype=torch.long)
    model.eval()
    with torch.no_grad():
        for i in range(0, len(x), batch):
            pred = model(x[i:i + batch]).argmax(1)
            t = y[i:i + batch]
            keep = t != ignore
            conf += torch.bincount(t[keep] * classes + pred[keep], minlength=classes * classes).view(classes, classes)
    tp = conf.diag().double()
    union = conf.sum(0).double() + conf.sum(1).double() - tp
    present = union > 0
    return float((tp[present] / union[present]).mean())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cache")
    p.add_argument("--level", required=True)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", default="1e-3,3e-3,1e-2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--norm", choices=["batch", "group"], default="batch")
    p.add_argument("--optimizer", choices=["adam", "adamw"], default="adam")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    data, ignore = load(args.cache, args.level)
    x_tr, y_tr = data["train"]
    valid = y_tr[y_tr != ignore]
    classes = int(max(valid.max(), data["val"][1][data["val"][1] != ignore].max())) + 1
    out = {"batch": args.batch, "norm": args.norm, "optimizer": args.optimizer, "epochs": args.epochs, "lrs": []}
    for lr in [float(v) for v in args.lr.split(",")]:
        torch.manual_seed(args.seed)
        model = ConvHead(x_tr.shape[1], args.width, classes, tuple(y_tr.shape[1:]), args.norm)
        opt = (torch.optim.Adam if args.optimizer == "adam" else torch.optim.AdamW)(model.parameters(), lr=lr)
        best = (-1.0, 0, None)
        t0 = time.time()
        for epoch in range(1, args.epochs + 1):
            model.train()
            for idx in torch.randperm(len(x_tr)).split(args.batch):
                loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx], ignore_index=ignore)
                opt.zero_grad()
                loss.backward()
                opt.step()
            v = miou(model, *data["val"], classes, ignore)
            if v > best[0]:
                best = (v, epoch, miou(model, *data["test"], classes, ignore))
        out["lrs"].append({"lr": lr, "best_epoch": best[1], "val_miou": best[0], "test_miou": best[2],
                           "seconds_per_epoch": (time.time() - t0) / args.epochs})
    pick = max(out["lrs"], key=lambda r: r["val_miou"])
    out["best"] = pick
    print(json.dumps(out))


if __name__ == "__main__":
    main()
