#!/usr/bin/python3
"""Demo inputs for embcache: a slice of Fashion-MNIST (Debian's dataset-fashion-mnist) as an
array dataset (class labels) and as a segmentation dataset (masks), and a small CNN encoder
exported with torch.jit.script.

Usage: make_demo_data.py OUT_DIR [--train N] [--val N] [--test N]
"""
import argparse
import gzip
import os
import sys
from typing import List

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SOURCE = "/usr/share/datasets/fashion-mnist"
CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]


def read_idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class DemoEncoder(nn.Module):
    """Two feature levels (14x14 and 7x7 maps) and a pooled vector, like a tiny backbone."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        a = F.relu(self.c1(x))
        b = F.relu(self.c2(a))
        return [a, b, b.mean(dim=(2, 3))]


def main() -> None:
    # TorchScript writes a module's constants in Python's string-hash order, which is random per
    # process: without a fixed seed every export is a different file, and a rerun of the demo
    # would find its cache made with "a different encoder_sha256". With PYTHONHASHSEED=0 the
    # encoder file is the same bytes every time.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--train", type=int, default=3000)
    p.add_argument("--val", type=int, default=500)
    p.add_argument("--test", type=int, default=500)
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    train_x = read_idx(f"{SOURCE}/train-images-idx3-ubyte.gz")
    train_y = read_idx(f"{SOURCE}/train-labels-idx1-ubyte.gz")
    test_x = read_idx(f"{SOURCE}/t10k-images-idx3-ubyte.gz")
    test_y = read_idx(f"{SOURCE}/t10k-labels-idx1-ubyte.gz")
    n_tr, n_va, n_te = args.train, args.val, args.test
    images = np.concatenate([train_x[:n_tr + n_va], test_x[:n_te]])[:, None, :, :]
    labels = np.concatenate([train_y[:n_tr + n_va], test_y[:n_te]]).astype(np.int64)
    splits = ["train"] * n_tr + ["val"] * n_va + ["test"] * n_te
    names = [f"train-{i:05d}" for i in range(n_tr + n_va)] + [f"test-{i:05d}" for i in range(n_te)]
    text = h5py.string_dtype("utf-8")
    chunk = min(256, len(names))  # h5py refuses chunks larger than the data
    with h5py.File(os.path.join(args.out_dir, "fashion_mnist.h5"), "w") as f:
        f.create_dataset("images", data=images, chunks=(chunk, 1, 28, 28))
        f.create_dataset("labels", data=labels)
        f.create_dataset("names", data=names, dtype=text)
        f.create_dataset("splits", data=splits, dtype=text)
        f.attrs["classes"] = ",".join(CLASSES)
    # The same images as a segmentation dataset: each pixel of the garment (value > 40) is labelled
    # with its class + 1, the background 0, and a thin band at the garment's edge is ignored (255),
    # where the threshold is least certain.
    fg = images[:, 0] > 40
    edge = (images[:, 0] > 20) & ~fg
    masks = np.where(fg, labels[:, None, None] + 1, 0).astype(np.int32)
    masks[edge] = 255
    with h5py.File(os.path.join(args.out_dir, "fashion_mnist_seg.h5"), "w") as f:
        f.create_dataset("images", data=images, chunks=(chunk, 1, 28, 28))
        d = f.create_dataset("masks", data=masks, chunks=(chunk, 28, 28))
        d.attrs["ignore_index"] = 255
        f.create_dataset("names", data=names, dtype=text)
        f.create_dataset("splits", data=splits, dtype=text)
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(DemoEncoder().eval()), os.path.join(args.out_dir, "demo_encoder.pt"))
    print(f"wrote {args.out_dir}/fashion_mnist.h5 ({len(names)} windows: {n_tr} train, {n_va} val, "
          f"{n_te} test), fashion_mnist_seg.h5 (the same with masks) and {args.out_dir}/demo_encoder.pt")


if __name__ == "__main__":
    main()
