#!/usr/bin/env python3
"""Concurrency soak: readers open one cache in a loop while shard writers and compacts change it.

For --seconds, cycles run one after another: three `precompute --shard I/3` writers start at
once into an empty cache (each commits often and installs its part when it ends), a `compact`
is tried while they run (it either compacts or is refused because a precompute is writing), and
a last `compact` runs once they are done; the cycle's cache must then equal a single-process
cache bit for bit (same keys, features and labels). All the while, three readers loop:

  inspect      `embcache inspect --json`
  train-probe  a one-epoch linear probe on the cache
  h5py         opens the cache file as any h5py user would and reads every row of the index,
               the levels and the labels

A reader may succeed or fail with a documented line (the cache is being written, there is no
cache yet); anything else is a defect, and so is a row an h5py reader sees twice or with
features other than the single-process cache's (a torn or duplicated row).

Usage: soak.py --embcache BIN --fixtures DIR [--seconds 30] [--work DIR] [--json OUT]
Exit status: 0 when nothing was a defect, 1 otherwise.
"""
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
import fixtures  # noqa: E402  (tests/python/fixtures.py: datasets and cache comparison)
from trial_args import trial_parser  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402

# What a reader may be told while writers work (docs/scale-out.md, docs/precompute.md).
DOCUMENTED = {
    "inspect": ["cache is being written", "no such cache file", "no cache yet, but an interrupted run left"],
    "train-probe": ["being written", "cache.h5: no such file", "no cache yet"],
    "compact": ["is writing into it; compact it when that run ends", "no such cache file"],
}


class Gate:
    """Readers pass while it is open; closing it waits for those inside. The soak removes one
    cycle's cache with the gate closed: deleting a cache under its readers is the user's act, not a
    concurrency defect of embcache's."""

    def __init__(self):
        self.cond = threading.Condition()
        self.inside = 0
        self.closed = False

    def __enter__(self):
        with self.cond:
            while self.closed:
                self.cond.wait()
            self.inside += 1

    def __exit__(self, *exc):
        with self.cond:
            self.inside -= 1
            self.cond.notify_all()

    def close(self):
        with self.cond:
            self.closed = True
            while self.inside:
                self.cond.wait()

    def open(self):
        with self.cond:
            self.closed = False
            self.cond.notify_all()


class Soak:
    def __init__(self, embcache, enc, work):
        self.embcache, self.work = str(embcache), work
        self.opts = ["--encoder", str(enc / "multi_scripted.pt"), "--dataset", "data.h5", "--crop-size", "32",
                     "--overlap", "4", "--batch-size", "8", "--dtype", "float16", "--quiet", "--commit-seconds", "0.05"]
        self.stop = threading.Event()
        self.gate = Gate()
        self.lock = threading.Lock()
        self.tally = {}
        self.defects = []
        self.reference = None

    def count(self, who, outcome):
        with self.lock:
            self.tally.setdefault(who, {}).setdefault(outcome, 0)
            self.tally[who][outcome] += 1

    def defect(self, who, text):
        with self.lock:
            self.defects.append(f"{who}: {text}")
        self.count(who, "defect")

    def run(self, who, argv, timeout=300):
        try:
            p = subprocess.run(argv, cwd=self.work, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.defect(who, f"hung for {timeout} s: {' '.join(argv)}")
            return None
        return p

    def judge(self, who, p):
        """Counts a finished reader or compact; True when it succeeded."""
        if p is None:
            return False
        if p.returncode == 0:
            self.count(who, "ok")
            return True
        lines = [line for line in p.stderr.splitlines() if line.strip() and "warning:" not in line]
        if len(lines) == 1 and any(text in lines[0] for text in DOCUMENTED[who]):
            self.count(who, "documented refusal")
            return False
        self.defect(who, f"exit {p.returncode}: {p.stderr.strip()[-300:]}")
        return False

    # -- readers --------------------------------------------------------------------------------
    def inspect_loop(self):
        while not self.stop.is_set():
            with self.gate:
                self.judge("inspect", self.run("inspect", [self.embcache, "inspect", "cache.h5", "--json"]))

    def probe_loop(self):
        while not self.stop.is_set():
            with self.gate:
                self.judge("train-probe", self.run("train-probe", [
                    self.embcache, "train-probe", "--cache", "cache.h5", "--out", "probe-run", "--task", "classification",
                    "--head", "linear", "--levels", "1", "--epochs", "1", "--quiet"]))

    def h5py_loop(self):
        while not self.stop.is_set():
            with self.gate:
                self.h5py_read()

    def h5py_read(self):
        path = self.work / "cache.h5"
        if not path.exists():
            self.count("h5py", "no cache yet")
            time.sleep(0.01)
            return
        try:
            keys, levels, labels = fixtures.read_cache_by_key(str(path))
        except FileNotFoundError:
            self.count("h5py", "no cache yet")
            return
        except Exception as e:  # noqa: BLE001 - an h5py failure on a cache is the finding
            self.defect("h5py", f"{type(e).__name__}: {e}")
            return
        problem = self.rows_problem(keys, levels, labels)
        if problem:
            self.defect("h5py", problem)
        else:
            self.count("h5py", "ok")

    def rows_problem(self, keys, levels, labels):
        if len(set(keys)) != len(keys):
            return f"{len(keys) - len(set(keys))} rows seen twice"
        ref_keys, ref_levels, ref_labels = self.reference
        where = {k: i for i, k in enumerate(ref_keys)}
        missing = [k for k in keys if k not in where]
        if missing:
            return f"a row the single-process cache does not have: {missing[0]}"
        rows = np.array([where[k] for k in keys], dtype=np.int64)
        for name, values in levels.items():
            ref = ref_levels[name][rows]
            if not np.array_equal(values.view(np.uint8), ref.view(np.uint8)):
                bad = ~(values.view(np.uint8).reshape(len(rows), -1) == ref.view(np.uint8).reshape(len(rows), -1)).all(1)
                zero = (values.view(np.uint8).reshape(len(rows), -1)[bad] == 0).all(1)
                return (f"level {name}: {int(bad.sum())} of {len(rows)} rows' features differ from the single-process "
                        f"cache ({int(zero.sum())} of them all zeros)")
        for name, values in labels.items():
            if not np.array_equal(values, ref_labels[name][rows]):
                return f"labels {name}: a row differs from the single-process cache"
        return None

    # -- writers --------------------------------------------------------------------------------
    def cycle(self, rng):
        self.gate.close()
        for name in ("cache.h5", "cache.h5.parts", "cache.h5.runs"):
            p = self.work / name
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
        self.gate.open()
        writers = [subprocess.Popen([self.embcache, "precompute", *self.opts, "--out", "cache.h5", "--shard", f"{i}/3"],
                                    cwd=self.work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                   for i in range(3)]
        time.sleep(rng.uniform(0.2, 1.5))
        self.judge("compact", self.run("compact", [self.embcache, "compact", "cache.h5", "--quiet"]))
        for i, w in enumerate(writers):
            _, err = w.communicate(timeout=600)
            if w.returncode != 0:
                self.defect("writer", f"shard {i}/3 exit {w.returncode}: {err.strip()[-300:]}")
                return False
            self.count("writer", "ok")
        if not self.judge("compact", self.run("compact", [self.embcache, "compact", "cache.h5", "--quiet"])):
            return False
        keys, levels, labels = fixtures.read_cache_by_key(str(self.work / "cache.h5"))
        if len(keys) != len(self.reference[0]):
            self.defect("cycle", f"the compacted cache holds {len(keys)} rows, the single-process one {len(self.reference[0])}")
            return False
        problem = self.rows_problem(keys, levels, labels)
        if problem:
            self.defect("cycle", "the compacted cache: " + problem)
            return False
        self.count("cycle", "equal to the single-process cache")
        return True


def main():
    p = trial_parser(__doc__)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--windows", type=int, default=96)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="embcache-soak-", dir=args.work))
    soak = Soak(args.embcache.resolve(), args.fixtures.resolve(), work)
    fixtures.make_dataset(str(work / "data.h5"), args.windows, 3, 48, 64, "uint8", "class", True, 0, 1, True, False, 0)
    subprocess.run([soak.embcache, "precompute", *soak.opts, "--out", "reference.h5"], cwd=work, check=True)
    soak.reference = fixtures.read_cache_by_key(str(work / "reference.h5"))

    rng = random.Random(args.seed)
    readers = [threading.Thread(target=f, daemon=True) for f in (soak.inspect_loop, soak.probe_loop, soak.h5py_loop)]
    started = time.monotonic()
    for t in readers:
        t.start()
    cycles = 0
    while time.monotonic() - started < args.seconds:
        cycles += 1
        if not soak.cycle(rng):
            break
    soak.stop.set()
    for t in readers:
        t.join(timeout=600)
    seconds = time.monotonic() - started
    print(f"soak: {cycles} cycles in {seconds:.0f} s ({len(soak.reference[0])} rows each); " +
          "; ".join(f"{who}: " + ", ".join(f"{n} {what}" for what, n in sorted(t.items()))
                    for who, t in sorted(soak.tally.items())))
    if args.json:
        args.json.write_text(json.dumps({"cycles": cycles, "seconds": seconds, "tally": soak.tally,
                                         "defects": soak.defects}, indent=1))
    if soak.defects:
        for d in soak.defects[:20]:
            print("DEFECT " + d)
        print(f"soak: {len(soak.defects)} defects; work folder kept: {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
