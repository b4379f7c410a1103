#!/usr/bin/python3
"""Whether stacking dense heads into one module pays on this machine (docs/performance.md).

The conv head of train-probe (3x3 conv, GroupNorm, ReLU, twice, then a 1x1 conv and bilinear
upsampling to the mask) on the demo segmentation shapes (32x7x7 features, width 128, 10 classes,
28x28 masks, batch 64, AdamW), 8,000 random rows, one epoch each of:
  one       a lone head
  grouped3  3 heads as one module: the first conv over the shared input with 3 x 128 outputs,
            the later convs grouped (groups=3), GroupNorm over 3 x 8 groups
  in turn   3 lone heads, each stepping on every batch one after another
Usage: scripts/peers/bench_grouped_heads.py [THREADS]   (prints one line)
"""
import sys
import time

import torch
import torch.nn.functional as F

B, C, H, W, WIDTH, K, MASK, ROWS = 64, 32, 7, 7, 128, 10, 28, 8000


def make(members):
    """Parameters of `members` stacked conv heads, as the tensors their module reads."""
    g = members
    params = [torch.randn(g * WIDTH, C, 3, 3) * 0.05, torch.zeros(g * WIDTH), torch.ones(g * WIDTH),
              torch.zeros(g * WIDTH), torch.randn(g * WIDTH, WIDTH, 3, 3) * 0.03, torch.zeros(g * WIDTH),
              torch.ones(g * WIDTH), torch.zeros(g * WIDTH), torch.randn(g * K, WIDTH, 1, 1) * 0.1, torch.zeros(g * K)]
    return [p.requires_grad_(True) for p in params]


def forward(p, x, members):
    h = F.conv2d(x, p[0], p[1], padding=1)  # the shared input: one conv with every member's outputs
    h = F.relu(F.group_norm(h, 8 * members, p[2], p[3]))
    h = F.conv2d(h, p[4], p[5], padding=1, groups=members)
    h = F.relu(F.group_norm(h, 8 * members, p[6], p[7]))
    y = F.conv2d(h, p[8], p[9], groups=members)
    y = F.interpolate(y, size=(MASK, MASK), mode="bilinear", align_corners=False)
    return y.reshape(x.size(0), members, K, MASK, MASK).transpose(0, 1)


def epoch(x_all, y_all, members, modules=1):
    """Seconds of one epoch of `modules` modules of `members` stacked heads each."""
    sets = [make(members) for _ in range(modules)]
    optimizers = [torch.optim.AdamW(p, lr=1e-3) for p in sets]
    t = time.perf_counter()
    for start in range(0, ROWS - B + 1, B):
        x, y = x_all[start:start + B], y_all[start:start + B]
        for p, opt in zip(sets, optimizers):
            out = forward(p, x, members)
            loss = sum(F.cross_entropy(out[g], y) for g in range(members))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return time.perf_counter() - t


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x_all = torch.randn(ROWS, C, H, W)
    y_all = torch.randint(0, K, (ROWS, MASK, MASK))
    one = epoch(x_all, y_all, 1)
    grouped = epoch(x_all, y_all, 3)
    in_turn = epoch(x_all, y_all, 1, modules=3)
    print(f"{threads} threads: one head {one:.2f}s; 3 as one grouped module {grouped:.2f}s ({grouped / one:.2f}x); "
          f"3 one after another {in_turn:.2f}s ({in_turn / one:.2f}x)")


if __name__ == "__main__":
    main()
