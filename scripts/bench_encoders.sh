#!/usr/bin/env bash
# Real architectures through precompute against the same TorchScript file alone (docs/performance.md).
# MobileNetV2, ResNet-50, ConvNeXt-T and ViT-B/16 from Debian's python3-torchvision, random
# weights (the time of a forward call does not depend on them), 4 taps each, levels 2 and 3
# stored as float16, batch 64, --threads 2 (THREADS), uint8 inputs of 96-128 px. Per architecture, in
# REPEATS interleaved rounds:
#   encoder-only   the same batches through fresh copies of the encoder in the same process,
#                  half before the run and half after it (BRACKET, below; bench_precompute:
#                  warm-up included, as in the run)
#   enc in run     precompute's encoder_seconds;  wall: precompute's wall time (out of the box:
#                  the encoder as loaded)
#   py script      scripts/peers/encoder_loop.py --mode script: the whole serial script a user would
#                  write (load the model, then per batch an h5py read, conversion to float, the
#                  forward call and h5py writes of the outputs as float16), load included as
#                  precompute's wall includes loading its encoder
#   py forward     the forward calls of that script alone (the sum of the times around each call);
#                  FORWARD_LOOP=1 takes them from a separate plain loop over images read before
#                  its clock starts instead (--mode both: one more pass per model and round, so
#                  the rounds no longer fit in 15 minutes at these row counts)
# The Python processes get the heap embcache gives its encoder: glibc's malloc kept off mmap
# (MALLOC_MMAP_THRESHOLD_) and, as embcache's allocator scope does, transparent huge pages for it
# (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), so the comparison is of the pipelines, not of the
# heaps; PEER_HUGE_PAGES=0 leaves the peer on 4 KiB pages.
# Every process first runs one batch through a throwaway copy of the model (--warm-up-input,
# --warm-up): the first forward call in a process also generates oneDNN's kernels and grows the
# heap, and without that the measurement a process makes first pays it and the later ones do not.
# Each measured pass still loads its model afresh and pays its own TorchScript warm-up, on the
# heap the warm-up grew (one allocator scope spans bench_precompute's passes; the peer keeps its
# freed memory too): each side pays its process's first touch of that memory once. Known
# bias: a third copy in one process pays more in its first calls than a second (LibTorch's own
# behaviour); with BRACKET=half the run is the third copy in bench_precompute's process and the
# passes alone the second and fourth (BRACKET=0: the run the second, encoder-only the third).
# Prints the medians (min-max) and the ratios the targets are about, then each round with
# what the machine did meanwhile (steal, other processes' CPU), so a slow round can be told from
# outside interference, then each round's encoder calls: slow calls in the run and alone,
# whether the encoder's threads waited for a core in them, and the stages' CPU inside the calls
# and in the gaps between them (bench/thread_times.hpp).
#   BRACKET        where the encoder alone is timed in bench_precompute's process. half (the
#                  default): a pass before the run and a pass after it, each of about half the
#                  run's batches (at least 3), the same work in all as one pass after it (a
#                  few tenths of a second more: a second copy's load and warm-up); encoder-only
#                  is then bench_precompute's alone_seconds of the two (each pass's first two
#                  calls pay its copy's warm-up and count once, as the mean of the two; the
#                  later calls are pooled). A machine's speed drifts, so a pass on one side of
#                  the run measures the machine up to ten seconds away from it, and a drift
#                  that is linear in time cancels only out of a pass on each side. 0: one pass
#                  after the run. 1: a whole pass before and after (about 3 minutes more). With a pass before, the run is the third copy of the encoder in its
#                  process, not the second; the table also prints enc/after and wall/after
#                  (what the pass after alone would have given) and per round what the machine
#                  did during the pass before.
#   OPTIMIZED=1    adds the same run with --optimize (frozen and optimised for inference): its
#                  encoder-only, encoder_seconds and wall, and the difference from the plain
#                  encoder that the run measured (max over outputs of max |optimised - plain| /
#                  max |plain|)
# Usage: scripts/bench_encoders.sh [WORK_DIR]; REPEATS=N (default 5); ONLY=name,name; OPTIMIZED=1
# adds the --optimize runs (about 6 minutes more); BRACKET=half|0|1, FORWARD_LOOP=1 and
# PEER_HUGE_PAGES=0 (above);
# rows: by default, each model's rows take its encoder at least RUN_SECONDS (10) at THREADS
# threads on DEVICE, at the fastest of a few batches that export_torchvision.py times through
# the module precompute runs (5 rounds take about 13 minutes on 2 cores, 20 with OPTIMIZED=1);
# the output's second line says what it chose;
# ROWS="mobilenet_v2=15360,resnet50=1344" fixes counts (multiples of 64) instead;
# EXTRA="--opt ..." passes options to bench_precompute; THREADS=N the encoder's threads on both
# sides (default 2; on 2 cores THREADS=1 leaves the stages a core of their own);
# DEVICE=cuda runs the encoder on the GPU on both sides (default cpu; rows are timed there too);
# HASH_MEMO=off: precompute hashes its encoder file in every run (default: a memo in WORK_DIR, as
# a user's runs share ~/.cache/embcache: round 1 hashes each model's file, later rounds read the
# digest it remembered; the Python peer records no digest at all).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
[[ -n ${BUILD_DIR:-} && -x $BUILD/bench/bench_precompute ]] || scripts/setup.sh >/dev/null
PY=${PYTHON:-/usr/bin/python3}
START=$SECONDS
if ! $PY -c 'import torchvision' 2>/dev/null; then
  [[ $(id -u) -eq 0 ]] || { echo "bench_encoders: needs python3-torchvision (apt-get install python3-torchvision)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-torchvision >/dev/null
fi
WORK=${1:-$(mktemp -d /tmp/embcache-bench-encoders-XXXXXX)}
mkdir -p "$WORK"
REPEATS=${REPEATS:-5}
OPTIMIZED=${OPTIMIZED:-0}
THREADS=${THREADS:-2}
DEVICE=${DEVICE:-cpu}
PY_MODE=script
[[ ${BRACKET:-half} =~ ^(half|0|1)$ ]] || { echo "bench_encoders: BRACKET is half, 0 or 1, not ${BRACKET}" >&2; exit 2; }
[[ ${FORWARD_LOOP:-0} == 1 ]] && PY_MODE=both
B=$BUILD/bench/bench_precompute
export EMBCACHE_HASH_MEMO=${HASH_MEMO:-$WORK/hash-memo}
PEER_TUNABLES=
[[ ${PEER_HUGE_PAGES:-1} == 1 ]] && PEER_TUNABLES=glibc.malloc.hugetlb=1
# glibc keeps freed activations for reuse instead of unmapping them (as precompute's own
# allocator scope does for its encoder thread), so the peer is not slowed by page faults.
export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296
GLIBC_TUNABLES=${PEER_TUNABLES} $PY scripts/data/export_torchvision.py "$WORK" --only "${ONLY:-}" --rows "${ROWS:-}" --seconds "${RUN_SECONDS:-10}" \
  --threads "$THREADS" --device "$DEVICE" >"$WORK/models.jsonl" 2>"$WORK/export.err" ||
  { cat "$WORK/export.err" >&2; exit 1; }
# One line per model: name, encoder, dataset, input size, rows, and how the rows were chosen (the
# rest of the line: `read` puts it, spaces and all, into its last variable).
mapfile -t MODELS < <($PY -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    how = "%.0f ms per batch of 64" % (1e3 * j["seconds_per_batch"]) if "seconds_per_batch" in j else "ROWS"
    print(j["name"], j["encoder"], j["dataset"], j["size"], j["rows"], how)' "$WORK/models.jsonl")

echo "$(nproc) cores; device $DEVICE; $THREADS encoder threads; $REPEATS rounds"
rows=
for m in "${MODELS[@]}"; do
  read -r name _ _ _ count how <<<"$m"
  rows+="$name $count ($how); "
done
echo "rows: ${rows%; } (export took $((SECONDS - START)) s)"
if [[ $PY_MODE == both ]]; then echo "py forward: a separate plain loop"; else echo "py forward: the script's forward calls"; fi
echo "precompute's encoder hash memo: $EMBCACHE_HASH_MEMO"
echo "python's heap: malloc off mmap${PEER_TUNABLES:+, huge pages (GLIBC_TUNABLES=$PEER_TUNABLES)}; transparent_hugepage/enabled: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo absent)"
for round in $(seq "$REPEATS"); do
  for m in "${MODELS[@]}"; do
    read -r name enc data size count _ <<<"$m"
    batches=$(((count + 63) / 64)) bracket=()
    case ${BRACKET:-half} in
      half) before=$(((batches + 1) / 2 > 3 ? (batches + 1) / 2 : 3))
            bracket=(--alone-before-batches "$before" --alone-after-batches $((batches - before > 3 ? batches - before : 3))) ;;
      1) bracket=(--alone-before-batches "$batches") ;;
      0) ;;
    esac
    sync
    "$B" --encoder "$enc" --dataset "$data" --out "$WORK/out-$name.h5" --levels 2,3 --dtype float16 --batch-size 64 \
      --threads "$THREADS" --device "$DEVICE" --scale 0.00392157 --plain-write-mb 16 --warm-up-input "3,$size,$size" "${bracket[@]}" ${EXTRA:-} >"$WORK/$name-run-$round.json"
    rm -rf "$WORK/out-$name.h5" "$WORK/out-$name.h5.runs" "$WORK/out-$name.h5.parts"
    if ((OPTIMIZED)); then
      "$B" --encoder "$enc" --dataset "$data" --out "$WORK/out-$name.h5" --levels 2,3 --dtype float16 --batch-size 64 \
        --threads "$THREADS" --device "$DEVICE" --scale 0.00392157 --plain-write-mb 16 --warm-up-input "3,$size,$size" --optimize "${bracket[@]}" ${EXTRA:-} >"$WORK/$name-opt-$round.json"
      rm -rf "$WORK/out-$name.h5" "$WORK/out-$name.h5.runs" "$WORK/out-$name.h5.parts"
    fi
    GLIBC_TUNABLES=${PEER_TUNABLES} $PY scripts/peers/encoder_loop.py "$enc" "$data" --levels 2,3 --threads "$THREADS" --device "$DEVICE" --mode $PY_MODE --warm-up --out "$WORK/py-$name.h5" \
      >"$WORK/$name-py-$round.json"
    rm -f "$WORK/py-$name.h5"
  done
  echo "round $round done ($((SECONDS - START)) s)"
done
$PY - "$WORK" "$REPEATS" "$OPTIMIZED" "${MODELS[@]}" <<'PY'
import json, statistics, sys
work, repeats, optimized = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
models = [m.split()[0] for m in sys.argv[4:]]
def series(name, kind, key):
    return [json.load(open(f"{work}/{name}-{kind}-{r}.json"))[key] for r in range(1, repeats + 1)]
def cell(v):
    return f"{statistics.median(v):6.2f} ({min(v):.2f}-{max(v):.2f})"
cols = ["encoder-only", "enc in run", "wall", "py forward", "py script"]
def difference(m, kind, r):
    j = json.load(open(f"{work}/{m}-{kind}-{r}.json"))
    return max(j["optimize_difference"].values()) if j.get("encoder_optimized") else None
def optimised(m, kind):
    differences = [difference(m, kind, r) for r in range(1, repeats + 1)]
    return "no" if None in differences else f"yes ({max(differences):.1e})"
bracketed = all("encoder_only_seconds_after_only" in json.load(open(f"{work}/{m}-run-{r}.json"))
                for m in models for r in range(1, repeats + 1))
print(f"{'model':14} " + " ".join(f"{c:>20}" for c in cols) +
      "   enc/only  wall/only  wall/pyfwd  wall/pyscript  slow mode (enc max/min)  py fwd max/min  optimised (max rel. difference)" +
      ("  enc/after  wall/after" if bracketed else ""))
for m in models:
    only, enc = series(m, "run", "encoder_only_seconds"), series(m, "run", "encoder_seconds")
    wall, fwd, script = series(m, "run", "seconds"), series(m, "py", "forward_seconds"), series(m, "py", "seconds")
    med = statistics.median
    after = ""
    if bracketed:
        after_only = series(m, "run", "encoder_only_seconds_after_only")
        after = f"  {med(enc) / med(after_only):9.3f}  {med(wall) / med(after_only):10.3f}"
    print(f"{m:14} " + " ".join(f"{cell(v):>20}" for v in (only, enc, wall, fwd, script)) +
          f"   {med(enc) / med(only):8.3f}  {med(wall) / med(only):9.3f}  {med(wall) / med(fwd):10.3f}"
          f"  {med(wall) / med(script):13.3f}  {max(enc) / min(enc):23.3f}  {max(fwd) / min(fwd):14.3f}  {optimised(m, 'run')}" + after)
print("targets: enc/only <= 1.05, wall/only <= 1.10, wall/pyfwd <= 1.10, wall/pyscript < 1, slow mode <= 1.15")
print("py fwd max/min: the same spread of the Python loop's forward calls (the machine's own noise)")
if bracketed:
    print("encoder-only: passes before and after each run (BRACKET); enc/after and wall/after: against the pass")
    print("after the run alone, scaled to the run's batches (what BRACKET=0 measures)")
print()
print("per round, what the machine did meanwhile (host_load.hpp): seconds, then the process's CPU seconds")
print("(sys: the part spent in the kernel), the VM's steal seconds (its CPUs given to others by the")
print("hypervisor) and other processes' CPU seconds")
def host(h):
    if not h:
        return ""
    system = f" sys {h['system_cpu_seconds']:4.1f}" if "system_cpu_seconds" in h else ""
    return f"cpu {h['cpu_seconds']:5.1f}{system} st {h['steal_seconds']:4.2f} oth {h['others_cpu_seconds']:4.2f}"
print(f"{'model':14} {'round':>5}  " + "  ".join(f"{c:>45}" for c in ("enc in run (host: whole run)", "encoder-only", "py script")))
for m in models:
    for r in range(1, repeats + 1):
        run, py = json.load(open(f"{work}/{m}-run-{r}.json")), json.load(open(f"{work}/{m}-py-{r}.json"))
        cells = [f"{run['encoder_seconds']:6.2f} {host(run.get('host_during_run'))}",
                 f"{run['encoder_only_seconds']:6.2f} {host(run.get('host_during_encoder_only'))}",
                 f"{py['seconds']:6.2f} {host(py.get('host'))}"]
        print(f"{m:14} {r:5}  " + "  ".join(f"{c:>45}" for c in cells))
if bracketed:
    print()
    print("BRACKET: the encoder alone before and after each run: median ms per call after a pass's first two,")
    print("and the run's encoder seconds over the estimate from the pass before alone, the pass after alone")
    print("and both (host: what the machine did during the pass before, as in the table above)")
    print(f"{'model':14} {'round':>5}  {'before':>7} {'in run':>7} {'after':>7}  {'run/before':>10} {'run/after':>9} {'run/both':>8}  {'host during the pass before':>38}")
    for m in models:
        for r in range(1, repeats + 1):
            run = json.load(open(f"{work}/{m}-run-{r}.json"))
            per_call = lambda key: 1e3 * statistics.median(run[key][2:] or run[key])
            e = run["encoder_seconds"]
            print(f"{m:14} {r:5}  {per_call('encoder_only_before_call_seconds'):7.1f} {per_call('encoder_call_seconds'):7.1f}"
                  f" {per_call('encoder_only_call_seconds'):7.1f}  {e / run['encoder_only_seconds_before_only']:10.3f}"
                  f" {e / run['encoder_only_seconds_after_only']:9.3f} {e / run['encoder_only_seconds']:8.3f}"
                  f"  {host(run.get('host_during_encoder_only_before')):>38}")
print()
print("per round, the encoder's calls after its first two (bench_precompute: encoder_call_seconds,")
print("thread_times.hpp): median ms in the run and alone (alone: the calls after the first two of each")
print("pass); slow calls, over 1.3x the median alone; the ms that the encoder's threads waited for a core")
print("inside the calls, run and alone (alone scaled to the run's calls); the stages' CPU ms")
print("inside the run's calls and in the gaps between them, and the team's wait in those gaps (its")
print("wake-up); and in the run's slow calls, the ms per call that the team waited and the stages ran.")
print("Slow calls with no wait ran on both cores the whole call.")
print(f"{'model':14} {'round':>5}  {'median run/alone':>17}  {'slow run/alone':>14}  {'team wait in calls run/alone':>29}"
      f"  {'stages in calls/gaps':>20}  {'gap wait':>8}  {'slow calls: wait, stages':>25}")
ms = lambda values: f"{1e3 * sum(values):.0f}"
for m in models:
    for r in range(1, repeats + 1):
        run = json.load(open(f"{work}/{m}-run-{r}.json"))
        if "encoder_gap_stage_cpu_seconds" not in run:  # from before the call-start hook
            continue
        calls = run["encoder_call_seconds"][2:]
        # The encoder alone: the calls after each pass's first two, of both passes where there are two
        alone = run.get("encoder_only_before_call_seconds", [])[2:] + run["encoder_only_call_seconds"][2:]
        alone_wait = run.get("encoder_only_before_call_team_wait_seconds", [])[2:] + run["encoder_only_call_team_wait_seconds"][2:]
        if not calls or not alone:
            continue
        typical = statistics.median(alone)
        slow = [i for i, s in enumerate(calls) if s > 1.3 * typical]
        slow_alone = sum(s > 1.3 * typical for s in alone)
        wait, stages = run["encoder_call_team_wait_seconds"][2:], run["encoder_call_stage_cpu_seconds"][2:]
        gap_wait, gap_stages = run["encoder_gap_team_wait_seconds"][2:], run["encoder_gap_stage_cpu_seconds"][2:]
        in_slow = (f"{1e3 * statistics.mean(wait[i] for i in slow):5.1f}, {1e3 * statistics.mean(stages[i] for i in slow):5.1f}"
                   if slow else "-")
        # the alone passes' waits scaled to the run's number of calls
        team = f"{ms(wait):>7} / {ms([w * len(calls) / len(alone) for w in alone_wait]):>5} ms"
        print(f"{m:14} {r:5}  {1e3 * statistics.median(calls):7.1f} / {1e3 * typical:6.1f}  {len(slow):6} / {slow_alone:5}"
              f"  {team:>29}  {ms(stages) + ' / ' + ms(gap_stages) + ' ms':>20}  {ms(gap_wait) + ' ms':>8}  {in_slow:>25}")
if optimized:
    print()
    print("--optimize (frozen and optimised for inference), the same runs; py forward is the plain module's:")
    cols = ["encoder-only", "enc in run", "wall"]
    print(f"{'model':14} " + " ".join(f"{c:>20}" for c in cols) +
          "   enc/only  wall/only  wall/pyfwd  optimised wall/default wall  slow mode  optimised (max rel. difference)")
    for m in models:
        only, enc = series(m, "opt", "encoder_only_seconds"), series(m, "opt", "encoder_seconds")
        wall, fwd = series(m, "opt", "seconds"), series(m, "py", "forward_seconds")
        default_wall = series(m, "run", "seconds")
        med = statistics.median
        print(f"{m:14} " + " ".join(f"{cell(v):>20}" for v in (only, enc, wall)) +
              f"   {med(enc) / med(only):8.3f}  {med(wall) / med(only):9.3f}  {med(wall) / med(fwd):10.3f}"
              f"  {med(wall) / med(default_wall):27.3f}  {max(enc) / min(enc):9.3f}  {optimised(m, 'opt')}")
PY
echo "the benchmark took $(((SECONDS - START) / 60)) min $(((SECONDS - START) % 60)) s (rounds and export)"
