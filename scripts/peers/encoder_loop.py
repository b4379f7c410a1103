#!/usr/bin/python3
"""The plain-Python peer of `embcache precompute` for scripts/bench_encoders.sh: the same
TorchScript file over the same uint8 images in batches, under torch.inference_mode().

  --mode forward  the forward calls alone (images read and converted before the clock starts)
  --mode script   the whole serial script a user would write: load the model, then per batch read
                  it with h5py, convert it to float, run the encoder, write the chosen outputs as
                  float16 with h5py; `seconds` is all of it, load included (as precompute's wall
                  includes loading its encoder), and `forward_seconds` its forward calls alone
  --mode both     forward, then script, in one process (one Python start-up fewer); each pass
                  loads the model afresh and pays its warm-up, as a script of its own would

Usage: encoder_loop.py ENCODER DATASET --levels 1,2 [--batch 64] [--threads 2] [--mode forward]
                       [--out OUT.h5] [--device cpu]
On a GPU (--device cuda) each batch goes to the device as uint8 and is converted there, and a
forward call's time ends when the device has finished it (torch.cuda.synchronize).
Prints one JSON object: seconds, forward_seconds, load_seconds, batches, host (what the machine did
meanwhile: the process's CPU, steal and other processes' CPU seconds) (--mode both: forward_seconds
of the forward pass, seconds, script_forward_seconds and host of the script). Run it with MALLOC_MMAP_THRESHOLD_ set
high (bench_encoders.sh does) so glibc reuses freed activations instead of mapping fresh pages.
Each pass keeps the heap that what ran before it grew (the warm-up, the forward pass), as
bench_precompute's run and encoder-only pass keep the heap of its warm-up: paying the process's
first touch of that memory is what the warm-up is for, on both sides. (Both sides used to return
it between passes, and each pass then faulted it in again: ResNet-50's first two calls in precompute
took up to 0.7 s longer than alone, and loading ViT-B/16 0.30-0.32 s against 0.11 s.)
"""
import argparse
import json
import os
import time

import h5py
import numpy as np
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("encoder")
    p.add_argument("dataset")
    p.add_argument("--levels", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", choices=["forward", "script", "both"], default="forward")
    p.add_argument("--out", default="")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--warm-up", action="store_true",
                   help="pay the process's one-time costs with a throwaway copy of the model first")
    args = p.parse_args()
    args.device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch._C._jit_override_can_fuse_on_cpu(False)  # as embcache and upstream's default
    levels = [int(v) for v in args.levels.split(",")]
    if args.warm_up:
        warm_up(args)
    if args.mode == "both":
        forward = run(args, levels, "forward")
        script = run(args, levels, "script")
        script["script_forward_seconds"] = script.pop("forward_seconds")
        script["forward_seconds"] = forward["forward_seconds"]
        script["mode"] = "both"
        print(json.dumps(script))
    else:
        print(json.dumps(run(args, levels, args.mode)))


def host_sample():
    """(wall, this process's CPU seconds, all CPUs' busy seconds, steal seconds, this process's
    system CPU seconds) from /proc/stat, as bench/host_load.hpp reads them for embcache's side."""
    with open("/proc/stat") as f:
        fields = [float(v) for v in f.readline().split()[1:9]]
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (time.perf_counter(), time.process_time(), (user + nice + system + irq + softirq) * tick, steal * tick,
            os.times().system)


def host_load(start):
    """What the machine did since `start` (host_sample()): the process's CPU, steal, and the CPU
    time of every other process; a slow round with steal or others' CPU was slowed from outside."""
    end = host_sample()
    own, busy = end[1] - start[1], end[2] - start[2]
    return {"wall_seconds": end[0] - start[0], "cpu_seconds": own, "system_cpu_seconds": end[4] - start[4],
            "steal_seconds": end[3] - start[3], "others_cpu_seconds": max(0.0, busy - own)}


def warm_up(args):
    """One batch through a throwaway copy: the first forward call in a process also generates
    oneDNN's kernels and grows the heap, which a second copy of the model does not pay again."""
    with h5py.File(args.dataset, "r") as f:
        shape = (args.batch,) + f["images"].shape[1:]
    model = torch.jit.load(args.encoder, map_location=args.device).eval()
    x = torch.rand(shape, device=args.device)
    with torch.inference_mode():
        model(x)
    synchronize(args.device)
    del model, x  # freed, and kept by glibc for the measured pass (MALLOC_TRIM_THRESHOLD_)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(args, levels, mode):
    host = host_sample()
    t_load = time.perf_counter()
    model = torch.jit.load(args.encoder, map_location=args.device).eval()
    load_seconds = time.perf_counter() - t_load
    scale = 1.0 / 255.0
    with h5py.File(args.dataset, "r") as f:
        n = f["images"].shape[0]
        if mode == "forward":
            images = f["images"][:]
    forward = 0.0
    t0 = time.perf_counter()
    out = h5py.File(args.out, "w") if mode == "script" else None
    src = h5py.File(args.dataset, "r") if mode == "script" else None
    written = {}
    with torch.inference_mode():
        for start in range(0, n, args.batch):
            raw = src["images"][start:start + args.batch] if src else images[start:start + args.batch]
            x = torch.from_numpy(raw).to(args.device).float().mul_(scale)
            synchronize(args.device)
            t = time.perf_counter()
            ys = model(x)
            synchronize(args.device)
            forward += time.perf_counter() - t
            if out is None:
                continue
            for i in levels:
                y = ys[i].cpu().numpy().astype(np.float16)
                if i not in written:
                    written[i] = out.create_dataset(f"levels/{i}", shape=(n,) + y.shape[1:], dtype=np.float16,
                                                    chunks=(min(64, n),) + y.shape[1:])
                written[i][start:start + len(y)] = y
    if out is not None:
        out.close()
        src.close()
    end = time.perf_counter()
    return {"seconds": end - (t_load if mode == "script" else t0), "forward_seconds": forward, "load_seconds": load_seconds,
            "batches": (n + args.batch - 1) // args.batch, "mode": mode, "host": host_load(host)}


if __name__ == "__main__":
    main()
