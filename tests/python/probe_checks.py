#!/usr/bin/python3
"""Independent checks of `embcache train-probe`, computed from the cache with h5py + torch only.

  probe_checks.py lbfgs CACHE LEVEL            test accuracy of an L-BFGS logistic regression on
                                               the level's pooled, standardised train features
  probe_checks.py head CACHE RUN_DIR           head.pt run on the test split reproduces the test
                                               metric in RUN_DIR/metrics.json
  probe_checks.py segdata OUT.h5 [--n N]       synthetic segmentation dataset (1x28x28, 3 classes)
  probe_checks.py labeldata OUT.h5 KIND        images with multilabel (0/1 x4) or regression labels
  probe_checks.py same RUN_A RUN_B [COMBO]     two runs report identical metrics (optionally the
                                               histories of one combination only)
"""
import argparse
import json
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# As embcache does (encoder.cpp): no TorchScript fusion on CPU. Debian 13's torch 2.6 enables it, and
# a small ViT's second call then never returned.
torch._C._jit_override_can_fuse_on_cpu(False)


def split_rows(f, name):
    return np.flatnonzero(f["index/split"].asstr()[:] == name)


def pooled(f, level, rows):
    x = f[f"levels/{level}"].astype("f4")[:][rows]
    x = torch.from_numpy(x)
    return x.mean(dim=(2, 3)) if x.dim() == 4 else x


def lbfgs(args) -> int:
    with h5py.File(args.cache, "r") as f:
        tr, te = split_rows(f, "train"), split_rows(f, "test")
        xtr, xte = pooled(f, args.level, tr).double(), pooled(f, args.level, te).double()
        y = torch.from_numpy(f["labels/class"][:])
    ytr, yte = y[tr], y[te]
    mean, std = xtr.mean(0), xtr.std(0, unbiased=False).clamp_min(1e-6)
    xtr, xte = (xtr - mean) / std, (xte - mean) / std
    k = int(y.max()) + 1
    w = torch.zeros(xtr.shape[1], k, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(k, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=500, tolerance_grad=1e-9, tolerance_change=1e-12,
                            history_size=50, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xtr @ w + b, ytr) + args.l2 * (w * w).sum()
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    acc = ((xte @ w + b).argmax(1) == yte).double().mean().item()
    print(f"{acc:.6f}")
    return 0


class UPerHead(nn.Module):
    """mmsegmentation's UPerHead written with nn modules (GroupNorm for its BatchNorm, no
    dropout), as docs/train-probe.md describes embcache's upernet; parameters are taken from an
    exported head.pt by name, so equal outputs mean the generated head is this architecture."""

    def __init__(self, channels, width, classes, groups):
        super().__init__()
        def block(cin, cout, k):
            return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2), nn.GroupNorm(groups, cout), nn.ReLU())
        self.ppm = nn.ModuleList([block(channels[-1], width, 1) for _ in (1, 2, 3, 6)])
        self.bottleneck = block(channels[-1] + 4 * width, width, 3)
        self.laterals = nn.ModuleList([block(c, width, 1) for c in channels[:-1]])
        self.fpn = nn.ModuleList([block(width, width, 3) for _ in channels[:-1]])
        self.fuse = block(len(channels) * width, width, 3)
        self.cls = nn.Conv2d(width, classes, 1)

    def load_from(self, module):
        p = {name: t[0] for name, t in module.named_parameters()}
        def put(block, name):
            block[0].weight.data, block[0].bias.data = p["w" + name], p["b" + name]
            block[1].weight.data, block[1].bias.data = p["gw" + name], p["gb" + name]
        for s, b in zip((1, 2, 3, 6), self.ppm):
            put(b, f"ppm{s}")
        put(self.bottleneck, "bottleneck")
        for j, (lat, fpn) in enumerate(zip(self.laterals, self.fpn)):
            put(lat, f"lateral{j}")
            put(fpn, f"fpn{j}")
        put(self.fuse, "fuse")
        self.cls.weight.data, self.cls.bias.data = p["wo"], p["bo"]

    def forward(self, feats, out_size):  # feats finest first
        up = lambda t, size: F.interpolate(t, size=size, mode="bilinear", align_corners=False)
        x = feats[-1]
        top = self.bottleneck(torch.cat([x] + [up(b(F.adaptive_avg_pool2d(x, s)), x.shape[2:])
                                              for s, b in zip((1, 2, 3, 6), self.ppm)], 1))
        lat = [l(f) for l, f in zip(self.laterals, feats[:-1])] + [top]
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + up(lat[i], lat[i - 1].shape[2:])
        outs = [f(l) for f, l in zip(self.fpn, lat[:-1])] + [lat[-1]]
        outs = [outs[0]] + [up(o, outs[0].shape[2:]) for o in outs[1:]]
        return up(self.cls(self.fuse(torch.cat(outs, 1))), out_size)


def upernet(args) -> int:
    """head.pt of an upernet run equals UPerHead above with its parameters, on the test split."""
    with open(f"{args.run}/metrics.json") as fh:
        m = json.load(fh)
    module = torch.jit.load(f"{args.run}/head.pt")
    with h5py.File(args.cache, "r") as f:
        rows = split_rows(f, m["splits"]["test"]["name"])[:64]
        feats = [torch.from_numpy(f[f"levels/{l}"].astype("f4")[:][rows]) for l in m["best"]["levels"]]
        out_size = f["labels/mask"].shape[1:]
    order = sorted(range(len(feats)), key=lambda i: -feats[i].shape[2] * feats[i].shape[3])  # finest first
    finest = [feats[i] for i in order]
    width = dict(module.named_parameters())["wo"].shape[2]
    ref = UPerHead([t.shape[1] for t in finest], width, m["num_outputs"], 8 if width % 8 == 0 else 1)
    ref.load_from(module)
    with torch.no_grad():
        got, want = module(feats), ref(finest, out_size)
    err = float((got - want).abs().max() / want.abs().max())
    print(f"upernet head.pt against an nn.Module UPerHead: max relative difference {err:.2e}")
    return 0 if err < 1e-5 else 1


def pooled_levels(f, levels, dtype):
    """The levels of a cache read as embcache's pooled heads read them: each pooled over H x W
    (the mean computed in `dtype`), concatenated."""
    parts = []
    for level in levels:
        x = f[f"levels/{level}"].astype("f4")[:].astype(dtype)
        parts.append(x.mean(axis=(2, 3)) if x.ndim == 4 else x)
    return np.concatenate(parts, 1)


def sklearn_logreg(args) -> int:
    """Each C of a logreg run against scikit-learn's LogisticRegression(lbfgs) on the same
    features: each level pooled over H x W, standardised with the train split's mean and
    (population) std, concatenated."""
    import time
    from sklearn.linear_model import LogisticRegression
    with open(f"{args.run}/metrics.json") as fh:
        m = json.load(fh)
    with h5py.File(args.cache, "r") as f:
        split = f["index/split"].asstr()[:]
        y = f["labels/class"][:]
        x = pooled_levels(f, m["best"]["levels"], np.float64)
    tr, te = split == m["splits"]["train"]["name"], split == m["splits"]["test"]["name"]
    std = x[tr].std(0)
    z = (x - x[tr].mean(0)) / np.where(std > 1e-6, std, 1)
    worst, seconds = 0.0, 0.0
    for c in m["combinations"]:
        t0 = time.time()
        clf = LogisticRegression(C=c["C"], max_iter=1000).fit(z[tr], y[tr])
        seconds += time.time() - t0
        acc = float((clf.predict(z[te]) == y[te]).mean())
        diff = 100 * (c["test"]["accuracy"] - acc)
        worst = max(worst, abs(diff))
        print(f"C={c['C']:g}: test accuracy embcache {c['test']['accuracy']:.4f}, scikit-learn {acc:.4f} ({diff:+.2f} points)")
    ours = m["timing"]["train_seconds"]
    print(f"fit time for {len(m['combinations'])} values of C: embcache {ours:.2f} s (warm-started path), "
          f"scikit-learn {seconds:.2f} s (separate fits): {ours / seconds:.2f}x")
    return 0 if worst <= args.points else 1


def knn(args) -> int:
    """Each k of a knn run against DINO's k-NN evaluation written here with plain torch: pooled
    features, L2-normalised, cosine similarity to every train row, the k nearest vote with
    exp(similarity / T)."""
    with open(f"{args.run}/metrics.json") as fh:
        m = json.load(fh)
    temperature = m["options"].get("knn_temperature", 0.07)
    with h5py.File(args.cache, "r") as f:
        split = f["index/split"].asstr()[:]
        y = torch.from_numpy(f["labels/class"][:])
        x = torch.from_numpy(pooled_levels(f, m["best"]["levels"], np.float32))
    z = F.normalize(x, dim=1)
    tr = torch.from_numpy(split == m["splits"]["train"]["name"])
    te = torch.from_numpy(split == m["splits"]["test"]["name"])
    sim = z[te] @ z[tr].T
    worst = 0.0
    for c in m["combinations"]:
        v, i = sim.topk(c["k"], dim=1)
        votes = torch.zeros(int(te.sum()), m["num_outputs"]).scatter_add_(1, y[tr][i], (v / temperature).exp())
        acc = float((votes.argmax(1) == y[te]).double().mean())
        diff = 100 * (c["test"]["accuracy"] - acc)
        worst = max(worst, abs(diff))
        print(f"k={c['k']}: test accuracy embcache {c['test']['accuracy']:.4f}, reference {acc:.4f} ({diff:+.2f} points)")
    return 0 if worst <= 0.05 else 1


def head(args) -> int:
    with open(f"{args.run}/metrics.json") as fh:
        m = json.load(fh)
    levels = m["best"]["levels"]
    task = m["task"]
    module = torch.jit.load(f"{args.run}/head.pt")
    with h5py.File(args.cache, "r") as f:
        rows = split_rows(f, m["splits"]["test"]["name"])
        feats = [torch.from_numpy(f[f"levels/{l}"].astype("f4")[:][rows]) for l in levels]
        with torch.no_grad():
            out = module(feats)
        if task == "classification":
            y = torch.from_numpy(f["labels/class"][:][rows])
            got = (out.argmax(1) == y).double().mean().item()
            want = m["test"]["accuracy"]
        elif task == "segmentation":
            mask = torch.from_numpy(f["labels/mask"][:][rows]).long()
            ignore = int(f["labels/mask"].attrs.get("ignore_index", -1))
            pred = out.argmax(1)
            valid = mask != ignore
            k = m["num_outputs"]
            ious = []
            for c in range(k):
                tp = ((pred == c) & (mask == c) & valid).sum().item()
                union = (((pred == c) | (mask == c)) & valid).sum().item()
                if union > 0:
                    ious.append(tp / union)
            got, want = float(np.mean(ious)), m["test"]["miou"]
        else:
            print(f"unsupported task {task}", file=sys.stderr)
            return 1
    print(f"head.pt on the test split: {got:.6f}; metrics.json: {want:.6f}")
    if abs(got - want) > 1e-9:
        print("FAIL: head.pt does not reproduce the reported test metric", file=sys.stderr)
        return 1
    return 0


def segdata(args) -> int:
    """Bright squares (class 1) and dark discs (class 2) on a noisy mid-grey background (class 0)."""
    rng = np.random.default_rng(0)
    n = args.n
    images = np.zeros((n, 1, 28, 28), np.uint8)
    masks = np.zeros((n, 28, 28), np.int32)
    yy, xx = np.mgrid[0:28, 0:28]
    for i in range(n):
        img = np.full((28, 28), 128.0) + rng.normal(0, 8, (28, 28))
        m = np.zeros((28, 28), np.int32)
        for _ in range(2):
            s = rng.integers(6, 12)
            y0, x0 = rng.integers(0, 28 - s, 2)
            img[y0:y0 + s, x0:x0 + s] = 230 + rng.normal(0, 8)
            m[y0:y0 + s, x0:x0 + s] = 1
        r = rng.integers(4, 7)
        cy, cx = rng.integers(r, 28 - r, 2)
        disc = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        img[disc] = 25
        m[disc] = 2
        m[0, 0] = -1  # one ignored pixel per image
        images[i, 0] = np.clip(img, 0, 255)
        masks[i] = m
    splits = np.array(["train"] * (n * 7 // 10) + ["val"] * (n * 15 // 100), dtype=object)
    splits = np.concatenate([splits, np.array(["test"] * (n - len(splits)), dtype=object)])
    with h5py.File(args.out, "w") as f:
        f.create_dataset("images", data=images)
        d = f.create_dataset("masks", data=masks)
        d.attrs["ignore_index"] = -1
        f.create_dataset("splits", data=splits.astype(str).tolist(), dtype=h5py.string_dtype("utf-8"))
    return 0


def labeldata(args) -> int:
    """Images whose quadrant brightness gives 0/1 labels (multilabel) or a number (regression)."""
    rng = np.random.default_rng(1)
    n = args.n
    images = rng.integers(0, 256, (n, 1, 28, 28)).astype(np.uint8)
    bright = rng.random((n, 4)) < 0.5
    for q in range(4):
        y0, x0 = (q // 2) * 14, (q % 2) * 14
        images[:, 0, y0:y0 + 14, x0:x0 + 14] = np.where(bright[:, q, None, None], 200, 40) + rng.integers(0, 30, (n, 14, 14))
    splits = ["train"] * (n * 7 // 10) + ["val"] * (n * 15 // 100)
    splits += ["test"] * (n - len(splits))
    with h5py.File(args.out, "w") as f:
        f.create_dataset("images", data=images)
        if args.kind == "multilabel":
            f.create_dataset("labels", data=bright.astype(np.float32))
        else:
            f.create_dataset("labels", data=bright.sum(1).astype(np.float32) + 0.1 * rng.standard_normal(n).astype(np.float32))
        f.create_dataset("splits", data=splits, dtype=h5py.string_dtype("utf-8"))
    return 0


def same(args) -> int:
    with open(f"{args.a}/metrics.json") as fa, open(f"{args.b}/metrics.json") as fb:
        a, b = json.load(fa), json.load(fb)
    if args.combination:
        # A grid member against the lone head: the members' first layer is one GEMM over all
        # heads, whose blocking differs from a lone head's, so losses agree to float rounding
        # (relative 1e-5) and metrics to within one flipped prediction in a few hundred.
        ha = [r for r in a["history"] if r["combination"] == args.combination]
        hb = [r for r in b["history"] if r["combination"] == args.combination]
        ok = bool(ha) and len(ha) == len(hb)
        for ra, rb in zip(ha, hb):
            ok = ok and ra["epoch"] == rb["epoch"]
            ok = ok and abs(ra["train_loss"] - rb["train_loss"]) <= 1e-5 * abs(ra["train_loss"])
            ok = ok and all(abs(ra["val"][k] - rb["val"][k]) <= 0.005 for k in ra["val"])
        if not ok:
            print(f"FAIL: histories of {args.combination} differ:\n{ha[:2]}\n{hb[:2]}", file=sys.stderr)
            return 1
        worst = max(abs(ra["train_loss"] - rb["train_loss"]) / abs(ra["train_loss"]) for ra, rb in zip(ha, hb))
        print(f"{args.combination}: {len(ha)} epochs agree (largest relative loss difference {worst:.1e})")
        return 0
    keys = ["val", "test", "best", "combinations"]
    ha = [(r["epoch"], r["combination"], r["train_loss"], r["val"]) for r in a["history"]]
    hb = [(r["epoch"], r["combination"], r["train_loss"], r["val"]) for r in b["history"]]
    if any(a[k] != b[k] for k in keys) or ha != hb:
        print("FAIL: the two runs differ", file=sys.stderr)
        return 1
    print("identical metrics and histories")
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("lbfgs")
    q.add_argument("cache")
    q.add_argument("level")
    q.add_argument("--l2", type=float, default=0.0)
    q.set_defaults(fn=lbfgs)
    q = sub.add_parser("upernet")
    q.add_argument("cache")
    q.add_argument("run")
    q.set_defaults(fn=upernet)
    q = sub.add_parser("sklearn-logreg")
    q.add_argument("cache")
    q.add_argument("run")
    q.add_argument("--points", type=float, default=0.2)
    q.set_defaults(fn=sklearn_logreg)
    q = sub.add_parser("knn")
    q.add_argument("cache")
    q.add_argument("run")
    q.set_defaults(fn=knn)
    q = sub.add_parser("head")
    q.add_argument("cache")
    q.add_argument("run")
    q.set_defaults(fn=head)
    q = sub.add_parser("segdata")
    q.add_argument("out")
    q.add_argument("--n", type=int, default=600)
    q.set_defaults(fn=segdata)
    q = sub.add_parser("labeldata")
    q.add_argument("out")
    q.add_argument("kind", choices=["multilabel", "regression"])
    q.add_argument("--n", type=int, default=600)
    q.set_defaults(fn=labeldata)
    q = sub.add_parser("same")
    q.add_argument("a")
    q.add_argument("b")
    q.add_argument("combination", nargs="?")
    q.set_defaults(fn=same)
    args = p.parse_args()
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
