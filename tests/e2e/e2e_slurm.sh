#!/usr/bin/env bash
# Studies on a real Slurm (tests/slurm/cluster.sh: a single-node cluster on loopback ports): a
# 3-shard precompute and a probe grid through the slurm executor give the local executor's
# results table, and the single-process cache bit for bit; a rerun submits nothing; a task
# killed mid-run is resubmitted by the rerun (after --detach) and the cache ends identical; a
# failing task is reported with its job id and log; sbatch missing or refusing is one line.
source "$(dirname "$0")/lib.sh"
: "${DEMO_DATA_PY:?run through ctest}" "${CLUSTER_SH:?run through ctest}"
trap 'bash "$CLUSTER_SH" stop "$WORK/cluster"; rm -rf "$WORK"' EXIT
eval "$(bash "$CLUSTER_SH" start "$WORK/cluster")"
export SLURM_CONF

"$PYTHON" "$DEMO_DATA_PY" . --train 1200 --val 200 --test 200 >/dev/null
study() {  # study NAME EXECUTOR [SHARDS]
  cat >"$1.json" <<JSON
{ "version": 1, "output_dir": "out-$1", "executor": $2,
  "precompute": [ { "name": "enc", "encoder": "demo_encoder.pt", "dataset": "fashion_mnist.h5", "shards": ${3:-3},
                    "scale": 0.00392157, "mean": 0.286, "std": 0.353, "crop_size": 20, "overlap": 2, "dtype": "float16",
                    "batch_size": 16, "threads": 1 } ],
  "probes": [ { "name": "lin", "cache": "enc", "task": "classification", "head": ["linear", "mlp"], "levels": [[1], [2]],
                "lr": [0.001, 0.01], "epochs": 4 } ] }
JSON
}
table() { "$PYTHON" -c "import csv,sys; print(sorted((r['name'], r['val_accuracy'], r['test_accuracy'], r['best_epoch']) for r in csv.DictReader(open(sys.argv[1]))))" "$1"; }

# 1. The same study, locally and on Slurm: equal tables; the sharded cache is the single-process one.
study local '"local"'
study slurm '{"type": "slurm", "max_parallel": 3, "cpus_per_task": 1}'
"$EMBCACHE" run local.json >local.txt 2>&1 || fail "local study: $(cat local.txt)"
"$EMBCACHE" run slurm.json >slurm.txt 2>&1 || fail "slurm study: $(cat slurm.txt)"
grep -q "slurm: submitted precompute enc as job [0-9]* (3 tasks)" slurm.txt || fail "no 3-task array: $(cat slurm.txt)"
grep -q "slurm: 0 pending, 0 running, 4 done, 0 failed" slurm.txt || fail "progress: $(cat slurm.txt)"
[[ "$(table out-local/results.csv)" == "$(table out-slurm/results.csv)" ]] ||
  fail "results differ: local $(table out-local/results.csv) slurm $(table out-slurm/results.csv)"
echo "ok: the Slurm executor's results table equals the local executor's (8 runs)"
"$EMBCACHE" precompute --encoder demo_encoder.pt --dataset fashion_mnist.h5 --scale 0.00392157 --mean 0.286 --std 0.353 \
  --crop-size 20 --overlap 2 --dtype float16 --batch-size 16 --threads 1 --quiet --out ref.h5
fx same ref.h5 out-slurm/caches/enc.h5 || fail "3 shards of a job array differ from the single-process cache"
fx same ref.h5 out-local/caches/enc.h5 >/dev/null || fail "3 local shards differ from the single-process cache"

# 2. A rerun submits nothing.
"$EMBCACHE" run slurm.json >again.txt 2>&1 || fail "rerun: $(cat again.txt)"
grep -q "8 probe runs (8 finished, 0 to run" again.txt && grep -q "every shard is done" again.txt &&
  ! grep -q "submitted" again.txt || fail "the rerun submitted work: $(cat again.txt)"

# 3. --detach, a task killed mid-run (SIGKILL: no exit status), and the rerun that collects,
#    reports it and resubmits only what is missing.
# Large enough that a shard outlives its first commit by a margin: with 6,000 rows, once the
# stages had a core of their own (--threads 1 on 2 cores), shard 1 ended before the kill.
"$PYTHON" "$DEMO_DATA_PY" big --train 24000 --val 200 --test 200 >/dev/null
sed 's#"fashion_mnist.h5"#"big/fashion_mnist.h5"#; s#"demo_encoder.pt"#"big/demo_encoder.pt"#' slurm.json >kill.json
sed -i 's#out-slurm#out-kill#; s#"threads": 1#"threads": 1, "commit_seconds": 0.2#' kill.json
"$EMBCACHE" run kill.json --detach >detach.txt 2>&1 || fail "detach: $(cat detach.txt)"
grep -q "run \`embcache run .*kill.json\` later" detach.txt || fail "detach: $(cat detach.txt)"
# The process of shard 1 (found by its task's environment), killed as the OOM killer would.
victim=""
for _ in $(seq 300); do
  for pid in $(pgrep -f "kill.json --task precompute=enc" || true); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_ARRAY_TASK_ID=1" && victim=$pid
  done
  [[ -n $victim ]] && break
  sleep 0.1
done
[[ -n $victim ]] || fail "shard 1 never ran"
for _ in $(seq 300); do  # once it has committed rows: the resubmitted task installs them first
  compgen -G "out-kill/caches/enc.h5.runs/shard-1-of-3/seg-*" >/dev/null && break
  sleep 0.05
done
kill -9 "$victim" || fail "shard 1 ended before it could be killed"
rc=0
"$EMBCACHE" run kill.json >collect.txt 2>&1 || rc=$?
[[ $rc -eq 0 ]] || fail "the collecting run failed ($rc): $(cat collect.txt)"
grep -q "collecting 2 jobs an earlier" collect.txt || fail "collect: $(cat collect.txt)"
grep -q "job [0-9]*_1 (precompute enc shard 1) failed with exit status 137" collect.txt || fail "the kill was not seen: $(cat collect.txt)"
grep "job\\|submitted" collect.txt | sed 's/^/  /'
grep -q "submitted precompute enc as job [0-9]* (1 task)" collect.txt || fail "the killed shard was not resubmitted alone: $(cat collect.txt)"
"$EMBCACHE" precompute --encoder big/demo_encoder.pt --dataset big/fashion_mnist.h5 --scale 0.00392157 --mean 0.286 \
  --std 0.353 --crop-size 20 --overlap 2 --dtype float16 --batch-size 16 --threads 1 --quiet --out big-ref.h5
fx same big-ref.h5 out-kill/caches/enc.h5 || fail "after a killed task and its resubmission the cache differs"
[[ "$(table out-kill/results.csv | wc -l)" -eq 1 ]] && grep -q "lin (best first" collect.txt || fail "no results: $(cat collect.txt)"

# 3b. Ctrl-C while waiting cancels what this run submitted (exit 130).
sed 's#out-kill#out-int#' kill.json >int.json
"$EMBCACHE" run int.json >int.txt 2>&1 &
runner=$!
for _ in $(seq 200); do grep -q "submitted pass" int.txt && break; sleep 0.1; done
ids=$(sed -n 's/.* as job \([0-9]*\) .*/\1/p' int.txt | tr '\n' ' ')
[[ -n $ids ]] || fail "nothing submitted: $(cat int.txt)"
kill -INT "$runner"
rc=0
wait "$runner" || rc=$?
[[ $rc -eq 130 ]] || fail "Ctrl-C: exit $rc: $(cat int.txt)"
for _ in $(seq 50); do
  left=0
  for id in $ids; do squeue -h -r -j "$id" 2>/dev/null | grep -q . && left=1; done
  ((left)) || break
  sleep 0.2
done
((left == 0)) || fail "jobs $ids still queued after Ctrl-C"
grep -q "were cancelled (scancel)" int.txt || fail "Ctrl-C message: $(cat int.txt)"
echo "ok: Ctrl-C cancelled jobs $ids"

# 4. A failing task: its job id and log, and the error in the log.
cat >fail.json <<JSON
{ "version": 1, "output_dir": "out-fail", "executor": "slurm",
  "probes": [ { "name": "bad", "cache": "ref.h5", "task": "classification", "levels": [[7]], "epochs": 1 } ] }
JSON
rc=0
"$EMBCACHE" run fail.json >fail.txt 2>fail.err || rc=$?
[[ $rc -eq 3 && $(wc -l <fail.err) -eq 1 ]] || fail "a failing task: exit $rc: $(cat fail.err)"
grep -q "1 Slurm task failed (first: job [0-9]*_0 (pass 1 bad) failed with exit status [0-9]*; log: .*out-fail/slurm/logs/pass_1_bad-[0-9]*_0.out)" fail.err ||
  fail "failure line: $(cat fail.err)"
log=$(sed -n 's/.*log: \(.*\.out\)).*/\1/p' fail.err)
grep -q "level" "$log" || fail "the log lacks the error: $(cat "$log")"
echo "ok: a failing task is reported with its job id and log ($log)"

# 5. sbatch missing, or refusing the job: one line.
expect_error 4 "sbatch not found on PATH" env PATH=/nonexistent "$EMBCACHE" run fail.json
study refused '{"type": "slurm", "partition": "nosuchpartition"}' 1
expect_error 4 "sbatch refused precompute enc: sbatch: error: " "$EMBCACHE" run refused.json
echo "e2e_slurm: ok"
