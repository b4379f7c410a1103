#!/usr/bin/env python3
"""Injected I/O faults: a real embcache run in which one file-system system call fails.

Each trial copies a prepared starting state, runs one embcache command under
`strace -f -e inject=SYSCALL:error=ERR:when=N` (strace counts calls per thread, so every thread's
Nth call of SYSCALL fails), and classifies the outcome:

  completed   the run exited 0 (the fault was absorbed or never reached)
  refused     the run exited 4 with one stderr line (an I/O error named as such)
  defect      anything else: another exit code, several lines, an abort or signal, a hang; or,
              after the run, a cache that does not open or read back with valid checksums, a
              half-written run directory, or a rerun (no fault) that fails or ends different from
              an undisturbed run (same keys, bit-identical features and labels; for train-probe
              and studies the same metrics, heads and results).

Families (what the command is, and where it starts from):
  precompute   a fresh precompute
  incremental  a precompute over a cache that already holds half of the windows (shard 0/2)
  compact      compact of a cache made of two shards' parts
  train-probe  train-probe into a run directory that holds an older run's set
  study        embcache run of a study (precompute, two probe groups, ledger, results, report)
  full-disk    precompute and train-probe writing to a tmpfs too small for their output (root)

N is drawn from the calls an undisturbed census run made (per thread; openat only on the run's
own files, not the libraries the loader opens), the family, call and error uniformly.

Usage: fault_trials.py --embcache BIN --fixtures DIR [--trials N] [--seed S] [--families a,b]
                       [--work DIR] [--json OUT] [--keep]
Exit status: 0 when no trial is a defect, 1 otherwise (each defect printed with how to repeat it).
"""
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
import fixtures  # noqa: E402  (tests/python/fixtures.py: datasets and cache comparison)
from trial_args import trial_parser  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402

SYSCALLS = ["write", "pwrite64", "fsync", "fdatasync", "rename", "openat", "link", "ftruncate", "fallocate"]
ERRORS = ["ENOSPC", "EIO"]
FAMILIES = ["precompute", "incremental", "compact", "train-probe", "study", "full-disk"]
RUN_TIMEOUT = 300
ABORT_TEXT = re.compile(r"terminate called|abort|backtrace|Exception raised from|Segmentation", re.I)
# Files the loader and the runtime open before embcache's own work: a fault there is not a trial
# of embcache (the process cannot start), so census counts of openat skip them.
SYSTEM_PATH = re.compile(r'openat\([^"]*"(/usr/|/lib|/etc/|/proc/|/sys/|/dev/|/tmp/torch|/root/\.|/var/)')


class Defect(Exception):
    pass


def run(argv, cwd, timeout=RUN_TIMEOUT, env=None):
    """(exit code, stdout, stderr) of argv; a hang is a defect."""
    try:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise Defect(f"hung for {timeout} s: {' '.join(map(str, argv))}")
    return p.returncode, p.stdout, p.stderr


def must(argv, cwd, what):
    rc, out, err = run(argv, cwd)
    if rc != 0:
        raise Defect(f"{what}: exit {rc}: {err.strip()[-400:]}")
    return out


class Scenario:
    """The starting state of one family (a folder copied for each trial), its command, and the
    undisturbed result the trials are compared with."""

    def __init__(self, family, root, embcache, enc):
        self.family, self.embcache, self.enc = family, embcache, enc
        self.template = root / "templates" / family
        self.reference = root / "references" / family
        self.precompute_opts = [
            "--encoder", str(enc / "multi_scripted.pt"), "--dataset", "data.h5", "--crop-size", "32",
            "--overlap", "4", "--batch-size", "8", "--dtype", "float16", "--quiet", "--commit-seconds", "0.001",
        ]

    # -- commands -------------------------------------------------------------------------------
    def command(self, out_root="."):
        e = str(self.embcache)
        if self.family in ("precompute", "incremental"):
            return [e, "precompute", *self.precompute_opts, "--out", f"{out_root}/cache.h5"]
        if self.family == "compact":
            return [e, "compact", "cache.h5", "--quiet"]
        if self.family == "train-probe":
            return [e, "train-probe", "--cache", "cache.h5", "--out", f"{out_root}/run", "--task", "classification", "--head", "linear",
                    "--levels", "1", "--lr", "0.01", "--epochs", "3", "--bootstrap", "20", "--seed", "3"]
        if self.family == "study":
            return [e, "run", "study.json"]
        raise ValueError(self.family)

    # -- starting states ------------------------------------------------------------------------
    def prepare(self, dataset):
        t = self.template
        t.mkdir(parents=True)
        shutil.copy(dataset, t / "data.h5")
        e = str(self.embcache)
        if self.family == "incremental":
            must([e, "precompute", *self.precompute_opts, "--out", "cache.h5", "--shard", "0/2"], t, "setup shard 0/2")
        if self.family == "compact":
            for shard in ("0/2", "1/2"):
                must([e, "precompute", *self.precompute_opts, "--out", "cache.h5", "--shard", shard], t, f"setup {shard}")
        if self.family == "train-probe":
            must([e, "precompute", *self.precompute_opts, "--out", "cache.h5"], t, "setup cache")
            # An older run's set in the run directory: a failed run must leave it whole or none.
            must([e, "train-probe", "--cache", "cache.h5", "--out", "run", "--task", "classification", "--head", "linear", "--levels", "1",
                  "--lr", "0.1", "--epochs", "2", "--seed", "1"], t, "setup older run")
        if self.family == "study":
            (t / "study.json").write_text(json.dumps({
                "version": 1, "output_dir": "out",
                "defaults": {"probe": {"task": "classification", "cache": "enc", "epochs": 2, "batch_size": 32}},
                "precompute": [{"name": "enc", "encoder": str(self.enc / "multi_scripted.pt"), "dataset": "data.h5",
                                "crop_size": 32, "overlap": 4, "dtype": "float16"}],
                "probes": [
                    {"name": "sweep", "head": "linear", "levels": [[0], [1]], "lr": [1e-3, 1e-2], "bootstrap": 20},
                    {"name": "near", "head": "knn", "levels": 1, "k": [1, 5]},
                ],
            }, indent=1))
        self.reference.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(t, self.reference, symlinks=True)
        must(self.command(), self.reference, "undisturbed reference run")

    # -- checks after a trial -------------------------------------------------------------------
    def check_after_fault(self, d):
        """What a run that ended (either way) must leave: a cache that opens and reads back, a run
        directory that holds one whole set or none."""
        if self.family in ("precompute", "incremental", "compact"):
            check_cache_readable(self.embcache, d, "cache.h5")
        if self.family == "train-probe":
            check_run_dir(d / "run")
        if self.family == "study":
            check_cache_readable(self.embcache, d / "out", "caches/enc.h5", optional=True)
            check_study_runs(d / "out")

    def compare_with_reference(self, d):
        r = self.reference
        if self.family in ("precompute", "incremental", "compact"):
            same_cache(d / "cache.h5", r / "cache.h5")
        elif self.family == "train-probe":
            same_run_dir(d / "run", r / "run")
        elif self.family == "study":
            same_study(d / "out", r / "out")


def check_cache_readable(embcache, d, name, optional=False):
    path = d / name
    if not path.exists():
        runs = Path(str(path) + ".runs")
        if optional and not runs.exists():
            return
        rc, _, err = run([str(embcache), "inspect", name], d)
        if rc == 3 and ("no such cache file" in err or "interrupted run" in err):
            return
        raise Defect(f"no cache file, and inspect says (exit {rc}): {err.strip()}")
    rc, _, err = run([str(embcache), "inspect", name, "--json"], d)
    if rc != 0:
        raise Defect(f"the cache does not open after the run: inspect exit {rc}: {err.strip()}")
    try:
        with h5py.File(path, "r") as f:
            n = f["index/window"].shape[0]
            def read(name, obj):
                if isinstance(obj, h5py.Dataset):
                    if obj.shape and obj.shape[0] != n and name.split("/")[0] in ("index", "levels", "labels"):
                        raise Defect(f"{name} has {obj.shape[0]} rows, the index {n}")
                    obj[()]  # every chunk read: Fletcher-32 checksums verified
            f.visititems(read)
    except Defect:
        raise
    except Exception as e:  # noqa: BLE001 - any h5py failure here is the finding
        raise Defect(f"the cache does not read back: {type(e).__name__}: {e}")


def same_cache(a, b):
    ka, la, lba = fixtures.read_cache_by_key(str(a))
    kb, lb, lbb = fixtures.read_cache_by_key(str(b))
    if len(set(ka)) != len(ka):
        raise Defect("duplicate keys in the cache after the rerun")
    if set(ka) != set(kb):
        raise Defect(f"keys differ from the undisturbed run: {len(set(ka) - set(kb))} extra, {len(set(kb) - set(ka))} missing")
    order = {k: i for i, k in enumerate(kb)}
    perm = np.array([order[k] for k in ka])
    for name in lb:
        if name not in la or not np.array_equal(la[name].view(np.uint8), lb[name][perm].view(np.uint8)):
            raise Defect(f"level {name} differs from the undisturbed run")
    for name in lbb:
        if name not in lba or not np.array_equal(lba[name], lbb[name][perm]):
            raise Defect(f"labels {name} differ from the undisturbed run")


# What metrics.json says of how a run went (its speed, the memory it found, where it wrote)
# rather than what it found.
MEASURED_METRIC_FIELDS = {"timing", "read_mb_per_s", "wait_fraction", "wait_seconds", "peak_rss_bytes",
                          "host_memory_budget", "prefetch_hit_rate", "out", "seconds"}


def without(value, fields):
    if isinstance(value, dict):
        return {k: without(x, fields) for k, x in value.items() if k not in fields}
    if isinstance(value, list):
        return [without(x, fields) for x in value]
    return value


def metrics_without_timings(path):
    return without(json.loads(Path(path).read_text()), MEASURED_METRIC_FIELDS)


def check_run_dir(run_dir):
    if not run_dir.exists():
        return
    staged = [p.name for p in run_dir.iterdir() if p.name.startswith(".staging")]
    if staged:
        raise Defect(f"staged files left in the run directory: {staged}")
    names = {p.name for p in run_dir.iterdir()}
    if "metrics.json" in names:
        missing = {"head.pt", "history.csv"} - names
        if missing:
            raise Defect(f"metrics.json without {sorted(missing)}: a mixed or partial set")
        m = json.loads((run_dir / "metrics.json").read_text())
        rc = subprocess.run([sys.executable, "-c", "import torch,sys; torch.jit.load(sys.argv[1])", str(run_dir / "head.pt")],
                            capture_output=True).returncode
        if rc != 0:
            raise Defect("the run directory's head.pt does not load")
        if not isinstance(m, dict):
            raise Defect("metrics.json is not an object")


def check_study_runs(out):
    """Every run directory holds one whole set or none, and every run the ledger records as
    finished has its whole set."""
    for run_dir in (out / "runs").glob("*/*"):
        check_run_dir(run_dir)
    ledger = out / "ledger.jsonl"
    if not ledger.exists():
        return
    for line in ledger.read_text().splitlines()[1:]:
        entry = json.loads(line)
        if not (Path(entry["run_dir"]) / "metrics.json").exists():
            raise Defect(f"the ledger records run {entry['name']} as finished, but its run directory has no metrics.json")


def history_without_seconds(path):
    rows = [line.split(",") for line in path.read_text().splitlines()]
    drop = rows[0].index("seconds")
    return [r[:drop] + r[drop + 1:] for r in rows]


def same_run_dir(a, b):
    if metrics_without_timings(a / "metrics.json") != metrics_without_timings(b / "metrics.json"):
        raise Defect("metrics.json differs from the undisturbed run")
    if (a / "head.pt").read_bytes() != (b / "head.pt").read_bytes():
        raise Defect("head.pt differs from the undisturbed run")
    if history_without_seconds(a / "history.csv") != history_without_seconds(b / "history.csv"):
        raise Defect("history.csv differs from the undisturbed run")


# What a result row says of how it was run rather than what it found. A rerun that recomputed
# rows gives the cache a new content_id, and with it new run ids: rows are matched by name.
VARYING_RESULT_FIELDS = {"seconds", "samples_per_second", "fused_runs", "run_dir", "timing", "id", "cache_content"}


def study_rows(out):
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    return sorted((without(r, VARYING_RESULT_FIELDS) for r in rows), key=lambda r: (r["name"], r.get("seed", 0)))


def same_study(a, b):
    ids = [json.loads(line)["id"] for line in (a / "ledger.jsonl").read_text().splitlines()[1:] if line.strip()]
    if len(ids) != len(set(ids)):
        raise Defect("the ledger records a run twice")
    if study_rows(a) != study_rows(b):
        raise Defect("results.jsonl differs from the undisturbed study")
    for name in ("results.csv", "report.html"):
        if not (a / name).exists():
            raise Defect(f"{name} missing after the rerun")
    same_cache(a / "caches/enc.h5", b / "caches/enc.h5")


# -- census and trials ------------------------------------------------------------------------
def census(scenario, root):
    """Per call, the N for which some thread makes an Nth call (openat: on the run's own files)."""
    d = root / "census" / scenario.family
    shutil.copytree(scenario.template, d, symlinks=True)
    log = d / "census.strace"
    argv = ["strace", "-f", "-qq", "-o", str(log), "-e", "trace=" + ",".join(SYSCALLS), *scenario.command()]
    rc, _, err = run(argv, d)
    if rc != 0:
        raise SystemExit(f"fault_trials: the census run of {scenario.family} failed (exit {rc}): {err.strip()[-300:]}")
    counts, own_openat = {}, {}
    for line in log.read_text().splitlines():
        m = re.match(r"(\d+)\s+(\w+)\(", line)
        if not m or "resumed>" in line:
            continue
        pid, call = m.group(1), m.group(2)
        if call not in SYSCALLS:
            continue
        n = counts.setdefault((pid, call), 0) + 1
        counts[(pid, call)] = n
        if call == "openat" and not SYSTEM_PATH.search(line):
            own_openat.setdefault(n, True)
    candidates = {}
    for (pid, call), n in counts.items():
        if call == "openat":
            continue
        candidates.setdefault(call, set()).update(range(1, n + 1))
    if own_openat:
        candidates["openat"] = set(own_openat)
    shutil.rmtree(d)
    return {call: sorted(ns) for call, ns in candidates.items()}


def one_trial(scenario, root, call, error, n, index):
    d = root / "trials" / f"{index:04d}-{scenario.family}-{call}-{error}-{n}"
    shutil.copytree(scenario.template, d, symlinks=True)
    trace = d / "fault.strace"
    argv = ["strace", "-f", "-qq", "-o", str(trace), "-e", f"trace={call}",
            "-e", f"inject={call}:error={error}:when={n}", *scenario.command()]
    started = time.monotonic()
    rc, _, err = run(argv, d)
    injected = trace.read_text().count("(INJECTED)") if trace.exists() else 0
    trace.unlink(missing_ok=True)
    lines = [line for line in err.splitlines() if line.strip()]
    outcome = {"family": scenario.family, "call": call, "error": error, "n": n, "exit": rc, "injected": injected,
               "stderr": err.strip()[-300:]}
    try:
        if rc == 0:
            outcome["class"] = "completed"
            # A run that says it succeeded must have written what an undisturbed run writes.
            scenario.compare_with_reference(d)
        elif rc == 4 and len(lines) == 1 and not ABORT_TEXT.search(err):
            outcome["class"] = "refused"
        else:
            raise Defect(f"exit {rc} with {len(lines)} stderr lines: {err.strip()[-300:]}")
        scenario.check_after_fault(d)
        must(scenario.command(), d, "rerun without a fault")
        scenario.compare_with_reference(d)
    except Defect as e:
        outcome["class"] = "defect"
        outcome["defect"] = str(e)
        outcome["workdir"] = str(d)
        return outcome
    outcome["seconds"] = round(time.monotonic() - started, 2)
    shutil.rmtree(d)
    return outcome


def full_disk_trial(scenario, root, fraction, index):
    """The output on a tmpfs that has room for a fraction of what the undisturbed run wrote."""
    which = scenario.family
    out_name = "cache.h5" if which == "precompute" else "run"
    d = root / "trials" / f"{index:04d}-full-disk-{which}-{fraction:.2f}"
    shutil.copytree(scenario.template, d, symlinks=True)
    mnt = d / "disk"
    mnt.mkdir()
    need = sum(p.stat().st_size for p in scenario.reference.iterdir() if p.name.startswith(out_name) and p.is_file())
    need += sum(p.stat().st_size for p in (scenario.reference / out_name).rglob("*") if p.is_file()) \
        if (scenario.reference / out_name).is_dir() else 0
    size_kib = need // 1024 + 65536  # with the filler gone, room for the run and its temporary files
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mnt)]).returncode != 0:
        raise SystemExit("fault_trials: full-disk trials need root to mount a tmpfs (run as root, or leave out full-disk)")
    outcome = {"family": "full-disk", "call": which, "error": "ENOSPC", "n": f"{fraction:.2f}x{need}B"}
    try:
        # Leave room for the given fraction of the output, in the filler's 4 KiB pages.
        filler = size_kib * 1024 - int(fraction * need)
        with open(mnt / "filler", "wb") as f:
            f.write(b"\0" * max(0, filler - filler % 4096))
        argv = scenario.command(out_root="disk")
        rc, _, err = run(argv, d)
        lines = [line for line in err.splitlines() if line.strip()]
        outcome.update(exit=rc, stderr=err.strip()[-300:], injected=int(rc != 0))
        def same_as_reference():
            if which == "precompute":
                same_cache(mnt / "cache.h5", scenario.reference / "cache.h5")
            else:
                same_run_dir(mnt / "run", scenario.reference / "run")
        if rc == 0:
            outcome["class"] = "completed"
            same_as_reference()
        elif rc == 4 and len(lines) == 1 and not ABORT_TEXT.search(err):
            outcome["class"] = "refused"
        else:
            raise Defect(f"exit {rc} with {len(lines)} stderr lines: {err.strip()[-300:]}")
        if which == "precompute":
            check_cache_readable(scenario.embcache, mnt, out_name)
        else:
            check_run_dir(mnt / out_name)
        (mnt / "filler").unlink()
        must(argv, d, "rerun with room")
        same_as_reference()
    except Defect as e:
        outcome["class"] = "defect"
        outcome["defect"] = str(e)
        outcome["workdir"] = str(d)
    finally:
        subprocess.run(["umount", str(mnt)])
    if outcome["class"] != "defect":
        shutil.rmtree(d)
    return outcome


def main():
    p = trial_parser(__doc__)
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    args = p.parse_args()
    if shutil.which("strace") is None:
        sys.exit("fault_trials: strace is missing (scripts/setup.sh installs it)")
    families = [f for f in args.families.split(",") if f]
    for f in families:
        if f not in FAMILIES:
            sys.exit(f"fault_trials: --families: {f} is not one of {', '.join(FAMILIES)}")
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="embcache-faults-", dir=args.work))
    embcache, enc = args.embcache.resolve(), args.fixtures.resolve()
    rng = random.Random(args.seed)
    started = time.monotonic()

    dataset = root / "data.h5"
    fixtures.make_dataset(str(dataset), 24, 3, 48, 64, "uint8", "class", True, 0, 1, True, False, 0)
    scenarios, candidates = {}, {}
    for f in families:
        base = "precompute" if f == "full-disk" else f
        if base not in scenarios:
            scenarios[base] = Scenario(base, root, embcache, enc)
            scenarios[base].prepare(dataset)
            candidates[base] = census(scenarios[base], root)
    if "full-disk" in families and "train-probe" not in scenarios:
        scenarios["train-probe"] = Scenario("train-probe", root, embcache, enc)
        scenarios["train-probe"].prepare(dataset)
    print(f"fault_trials: seed {args.seed}, {args.trials} trials over {', '.join(families)}; census: " +
          "; ".join(f"{f} " + " ".join(f"{c}≤{max(ns)}" for c, ns in sorted(candidates[f].items()))
                    for f in candidates), flush=True)

    outcomes = []
    for i in range(args.trials):
        family = families[i % len(families)]
        if family == "full-disk":
            which = scenarios["precompute" if rng.random() < 0.5 else "train-probe"]
            o = full_disk_trial(which, root, rng.uniform(0.05, 0.95), i)
        else:
            s = scenarios[family]
            call = rng.choice(sorted(candidates[family]))
            o = one_trial(s, root, call, rng.choice(ERRORS), rng.choice(candidates[family][call]), i)
        outcomes.append(o)
        mark = "DEFECT" if o["class"] == "defect" else o["class"]
        print(f"  {i:3d} {o['family']:<11} {o['call']:<10} {o['error']:<6} N={o['n']:<6} injected={o.get('injected', '-')}"
              f" exit={o.get('exit')} {mark}" + (f": {o['defect']}" if o["class"] == "defect" else ""), flush=True)

    tally = {}
    for o in outcomes:
        tally.setdefault(o["family"], {}).setdefault(o["class"], 0)
        tally[o["family"]][o["class"]] += 1
    defects = [o for o in outcomes if o["class"] == "defect"]
    hit = sum(1 for o in outcomes if o.get("injected"))
    print(f"fault_trials: {len(outcomes)} trials ({hit} with a fault injected) in {time.monotonic() - started:.0f} s: " +
          "; ".join(f"{f}: " + ", ".join(f"{n} {c}" for c, n in sorted(t.items())) for f, t in tally.items()))
    if args.json:
        args.json.write_text(json.dumps({"seed": args.seed, "trials": outcomes, "tally": tally}, indent=1))
    if defects:
        for o in defects:
            print(f"DEFECT {o['family']} {o['call']} {o['error']} N={o['n']}: {o['defect']} (kept in {o['workdir']})")
        return 1
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
