#!/usr/bin/env bash
# embcache run / report end to end, as scenarios that ctest runs as separate entries
# (e2e_run_SCENARIO; one failure does not hide the others): config validation reports every
# problem at once and runs nothing; a study runs, fuses runs into passes, equals train-probe run
# alone, skips finished runs on rerun; it resumes after kill -9 and Ctrl-C without duplicates;
# corrupted ledgers are refused and the report's charts have data; a diverging lr costs only its
# run; results follow the cache; the example configs in configs/ plan cleanly.
# Usage: e2e_run.sh SCENARIO... (errors study crash ledger diverge grow configs; none = all)
source "$(dirname "$0")/lib.sh"
: "${PROBE_PY:?run through ctest}" "${DEMO_DATA_PY:?}"
probe() { "$PYTHON" "$PROBE_PY" "$@"; }

mkdir data
"$PYTHON" "$DEMO_DATA_PY" data --train 800 --val 200 --test 200 >/dev/null

# The study most scenarios use: a precompute and two probe groups (one fuses 6 runs, one uses zip).
write_study() {
cat >study.json <<'JSON'
{
  "version": 1,
  "output_dir": "out",
  "defaults": {
    "precompute": { "scale": 0.00392157, "mean": [0.286], "std": [0.353], "dtype": "float16" },
    "probe": { "task": "classification", "cache": "enc", "epochs": 4, "batch_size": 128 }
  },
  "precompute": [ { "name": "enc", "encoder": "data/demo_encoder.pt", "dataset": "data/fashion_mnist.h5" } ],
  "probes": [
    { "name": "sweep", "head": "linear", "levels": [[0], [1]], "lr": [1e-3, 1e-2, 3e-2], "bootstrap": 50 },
    { "name": "zipped", "head": "mlp", "levels": 1, "zip": ["lr", "weight_decay"], "lr": [1e-3, 1e-2], "weight_decay": [0, 0.01] }
  ]
}
JSON
}

# The study with a fourth learning rate, run to the end: 10 finished runs in out/.
finished_study() {
write_study
sed -i 's/"lr": \[1e-3, 1e-2, 3e-2\]/"lr": [1e-3, 1e-2, 3e-2, 1e-1]/' study.json
"$EMBCACHE" run study.json >run-setup.txt || fail "setup study: $(cat run-setup.txt)"
}

# start_then_signal CONFIG OUTPUT_DIR SIGNAL [CHECK]: runs the study in the background, runs
# CHECK (a command, its output to stderr) and sends SIGNAL once the first pass is in the ledger,
# and prints the exit status.
start_then_signal() {
  "$EMBCACHE" run "$1" >"$1.log" 2>&1 &
  local pid=$! rc=0
  for _ in $(seq 1 600); do
    [[ -f $2/ledger.jsonl ]] && [[ $(wc -l <"$2/ledger.jsonl") -ge 2 ]] && break
    sleep 0.05
  done
  [[ -z ${4:-} ]] || $4 >&2
  kill -"$3" $pid
  wait $pid 2>/dev/null || rc=$?
  echo $rc
}

scenario_errors() {
# A config with many mistakes: all reported at once, one line each, nothing created.
cat >bad.json <<'JSON'
{
  "version": 1,
  "output_dir": "out-bad",
  "precompute": [
    { "name": "enc", "encoder": "data/demo_encoder.pt", "dataset": "data/missing.h5" },
    { "name": "enc", "encoder": "data/demo_encoder.pt", "dataset": "data/fashion_mnist.h5", "dtype": ["float16", "float32"] },
    { "name": "grid", "encoder": "data/demo_encoder.pt", "dataset": "data/fashion_mnist.h5", "crop_size": "14x" },
    { "name": "copy", "encoder": "data/demo_encoder.pt", "dataset": "data/fashion_mnist.h5", "out": "out-bad/caches/enc.h5" },
    { "name": "self", "encoder": "data/demo_encoder.pt", "dataset": "data/fashion_mnist.h5", "out": "data/fashion_mnist.h5" }
  ],
  "probes": [
    { "name": "a", "cache": "enc", "task": "classification", "levels": [[1]], "lr": [0.1, 0.01, "fast"] },
    { "name": "b", "cache": "nope", "task": "classification", "levels": 1, "learning_rate": 0.1 },
    { "name": "c", "cache": "enc", "task": "classification", "head": "fpn", "levels": [[1]] },
    { "name": "d", "cache": "enc", "task": "classification", "levels": [[1]], "lr": [0.1, 0.01], "warmup_epochs": 30 },
    { "name": "e", "cache": "enc", "task": "classification", "levels": [[1], [2]], "lr": [0.01, 1e-2], "weight_decay": 0.5 }
  ]
}
JSON
rc=0
"$EMBCACHE" run bad.json >out.txt 2>err.txt || rc=$?
[[ $rc -eq 3 ]] || fail "bad config: expected exit 3, got $rc"
for want in 'precompute\[0\].dataset: .*missing.h5 does not exist' 'precompute\[1\].name: duplicate name "enc"' \
            'precompute\[1\].dtype: a list here would mean several caches' \
            'probes\[0\].lr\[2\]: expected a number, got "fast"' \
            'probes\[1\].learning_rate: unknown key "learning_rate"; did you mean "lr"' \
            'probes\[1\].cache: "nope" is neither a precompute entry' 'probes\[2\].levels \(levels=1\): fpn combines several levels' \
            'precompute\[2\].crop_size: expected S or WxH \(64 or 64x32\), got "14x"' \
            "precompute\[3\].out: .*out-bad/caches/enc.h5 is also precompute\[0\]'s cache; give each entry its own" \
            'precompute\[4\].out: .*data/fashion_mnist.h5 is the dataset itself' \
            'probes\[3\].warmup_epochs \(levels=1,lr=0.1\): 30 is not shorter than --epochs 20' \
            'probes\[4\]: e/levels=1,lr=0.01 \(levels\[0\], lr\[1\]\) is the same run as probes\[4\] e/levels=1,lr=0.01 \(levels\[0\], lr\[0\]\)'; do
  grep -qE -- "$want" err.txt || fail "bad config: stderr lacks /$want/: $(cat err.txt)"
done
! grep -qiE "terminate called|abort|Exception raised" err.txt || fail "abort in: $(cat err.txt)"
[[ ! -e out-bad ]] || fail "a rejected config created its output_dir"
echo "ok: $(head -1 err.txt) ($(($(wc -l <err.txt) - 1)) problems listed)"

printf '{\n  "version": 1,\n  "output_dir": "x",\n  "probes": [ { "name": "a", }\n]}\n' >malformed.json
expect_error 3 'malformed.json:4:30: malformed JSON' "$EMBCACHE" run malformed.json
echo '{"version": 1, "output_dir": "afile", "probes": []}' >file.json
touch afile
expect_error 3 'output_dir: .*afile exists and is not a directory' "$EMBCACHE" run file.json
echo '{"version": 2, "output_dir": "x", "precompute": []}' >v2.json
expect_error 3 'version: this embcache reads study version 1' "$EMBCACHE" run v2.json
}

scenario_study() {
write_study
"$EMBCACHE" run study.json --dry-run >plan.txt
grep -q "8 probe runs (0 finished, 8 to run in 3 train-probe passes)" plan.txt || fail "dry run plan: $(cat plan.txt)"
grep -q "sweep, 6 runs in one pass" plan.txt || fail "dry run should fuse the sweep: $(cat plan.txt)"
[[ ! -e out ]] || fail "--dry-run created the output_dir"
expect_error 2 "--only: nosuch: no precompute or probe entry" "$EMBCACHE" run study.json --only nosuch

"$EMBCACHE" run study.json >run1.txt
grep -q "linear-sweep\|sweep (best first by val accuracy)" run1.txt || fail "no results table: $(cat run1.txt)"
"$PYTHON" - <<'PY' || fail "study outputs"
import csv, json, os
rows = list(csv.DictReader(open("out/results.csv")))
assert len(rows) == 8 and len({r["id"] for r in rows}) == 8, len(rows)
for r in rows:
    d = r["run_dir"]
    for f in ("metrics.json", "history.csv", "head.pt"):
        assert os.path.isfile(os.path.join(d, f)), (d, f)
    m = json.load(open(os.path.join(d, "metrics.json")))
    assert m["run"]["id"] == r["id"] and len(m["history"]) == 4, m["run"]
sweep = [r for r in rows if r["group"] == "sweep"]
assert all("test_accuracy" in r and r["fused_runs"] == "6" for r in sweep)
assert len([l for l in open("out/results.jsonl")]) == 8
print("ok: 8 runs, each with metrics.json, history.csv and head.pt; results.csv and results.jsonl complete")
PY
# A fused run equals the same run through train-probe alone.
run_dir=$("$PYTHON" -c 'import csv; print([r["run_dir"] for r in csv.DictReader(open("out/results.csv")) if r["name"] == "sweep/levels=1,lr=0.01"][0])')
"$EMBCACHE" train-probe --cache out/caches/enc.h5 --out alone --task classification --levels 1 --lr 0.01 --epochs 4 \
  --batch-size 128 --bootstrap 50 --quiet >/dev/null
probe same "$run_dir" alone "linear levels=1 lr=0.01 wd=0"
probe head out/caches/enc.h5 "$run_dir"

# Rerun: nothing to do. An edit that adds runs runs only those.
"$EMBCACHE" run study.json >run2.txt
grep -q "(8 finished, 0 to run in 0 train-probe passes)" run2.txt || fail "rerun: $(head -1 run2.txt)"
sed -i 's/"lr": \[1e-3, 1e-2, 3e-2\]/"lr": [1e-3, 1e-2, 3e-2, 1e-1]/' study.json
"$EMBCACHE" run study.json >run3.txt
grep -q "(8 finished, 2 to run in 1 train-probe pass)" run3.txt || fail "edited rerun: $(head -1 run3.txt)"

# A level the cache lacks, in the last probe entry: found before any pass trains (and by --dry-run).
cat >typo.json <<'JSON'
{ "version": 1, "output_dir": "out-typo",
  "defaults": { "probe": { "task": "classification", "cache": "out/caches/enc.h5", "epochs": 1 } },
  "probes": [ { "name": "fine", "levels": [1] }, { "name": "typo", "levels": [7] },
              { "name": "vector", "head": "conv", "levels": [2] } ] }
JSON
"$EMBCACHE" run typo.json --dry-run >typo-plan.txt
grep -q "will fail: --levels: level '7' is not in" typo-plan.txt || fail "dry run of a level typo: $(cat typo-plan.txt)"
grep -q "will fail: --levels: conv needs feature maps, but level 2 is a vector" typo-plan.txt || fail "dry run, conv on a vector: $(cat typo-plan.txt)"
[[ $(grep -c "will fail" typo-plan.txt) -eq 2 ]] || fail "dry run: only two passes fail: $(cat typo-plan.txt)"
expect_error 2 "typo.json: probe entry \"typo\": --levels: level '7' is not in .*; no probe pass was run" "$EMBCACHE" run typo.json
[[ ! -e out-typo/passes && ! -e out-typo/runs ]] || fail "a pass ran before the level typo was found"
}

scenario_crash() {
write_study
sed -i 's/"lr": \[1e-3, 1e-2, 3e-2\]/"lr": [1e-3, 1e-2, 3e-2, 1e-1]/' study.json
# kill -9 in the middle of a study, rerun: finished runs are kept, the rest run, no duplicates.
sed 's/"output_dir": "out"/"output_dir": "out-kill"/; s/"epochs": 4/"epochs": 40/' study.json >kill.json
# While it works, a second run of the same study is refused (it would train every run again);
# the kill -9 leaves no lock that blocks the rerun.
second_run_refused() { expect_error 4 "out-kill: another \`embcache run\` is working in it" "$EMBCACHE" run kill.json; }
rc=$(start_then_signal kill.json out-kill KILL second_run_refused)
[[ $rc -eq 137 ]] || fail "kill -9: expected the study to die with 137, got $rc"
done_before=$(($(wc -l <out-kill/ledger.jsonl) - 1))
[[ $done_before -ge 1 && $done_before -lt 10 ]] || fail "kill -9 landed outside the study ($done_before runs finished)"
"$EMBCACHE" run kill.json >kill2.txt
grep -q "($done_before finished, $((10 - done_before)) to run" kill2.txt || fail "resume after kill -9: $(head -1 kill2.txt)"
"$PYTHON" - <<'PY' || fail "results after kill -9"
import csv
rows = list(csv.DictReader(open("out-kill/results.csv")))
assert len(rows) == 10 and len({r["id"] for r in rows}) == 10, [r["name"] for r in rows]
print("ok: after kill -9 and a rerun, results.csv has all 10 runs once")
PY

# Ctrl-C: exit 130, finished runs stay in the ledger, a rerun finishes the study.
sed 's/"output_dir": "out"/"output_dir": "out-int"/; s/"epochs": 4/"epochs": 40/' study.json >int.json
rc=$(start_then_signal int.json out-int INT)
[[ $rc -eq 130 ]] || fail "Ctrl-C during a study: expected exit 130, got $rc"
"$EMBCACHE" run int.json >int2.txt
grep -q "finished, .* to run" int2.txt && [[ $(($(wc -l <out-int/results.csv) - 1)) -eq 10 ]] || fail "rerun after Ctrl-C: $(head -1 int2.txt)"
echo "ok: Ctrl-C stops a study with exit 130; the rerun finishes it"
}

scenario_ledger() {
finished_study
# Ledger damage: a torn last line is repaired; garbage or another version is refused.
printf '{"id": "tor' >>out/ledger.jsonl
"$EMBCACHE" run study.json >run4.txt
grep -q "(10 finished, 0 to run" run4.txt || fail "torn ledger line: $(head -1 run4.txt)"
cp out/ledger.jsonl ledger.good
sed -i '3s/.*/this is not json/' out/ledger.jsonl
expect_error 3 "ledger.jsonl: line 3 is not JSON; the ledger is corrupted" "$EMBCACHE" run study.json
sed '1s/"study_version":1/"study_version":7/' ledger.good >out/ledger.jsonl
expect_error 3 "written for study version 7" "$EMBCACHE" run study.json
cp ledger.good out/ledger.jsonl

# The report: a table row per run and charts with data.
"$EMBCACHE" report out >report.txt
"$PYTHON" - <<'PY' || fail "report.html"
from html.parser import HTMLParser
class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.charts, self.rows, self.in_body, self.marks = [], 0, False, 0
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and a.get("class") == "chart":
            self.charts.append(int(a["data-points"]))
        if tag == "tbody":
            self.in_body = True
        if tag == "tr" and self.in_body:
            self.rows += 1
        if tag in ("polyline", "rect") and a.get("class") in ("series", "bar"):
            self.marks += 1
    def handle_endtag(self, tag):
        if tag == "tbody":
            self.in_body = False
p = P()
text = open("out/report.html").read()
p.feed(text)
assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text, "report must be offline"
assert p.rows == 10, p.rows
assert len(p.charts) == 8 and all(n > 0 for n in p.charts), p.charts  # 4 charts x 2 groups
assert p.marks >= 10, p.marks
print(f"ok: report.html: {p.rows} result rows, {len(p.charts)} charts with {sum(p.charts)} points")
PY
expect_error 3 "no results.jsonl" "$EMBCACHE" report data
# A results.jsonl edited by hand (or by another tool): the line and the field, not a JSON library's words.
mkdir -p edited
"$PYTHON" - <<'PY'
import json
rows = [json.loads(l) for l in open("out/results.jsonl")]
del rows[1]["group"]
rows[2]["lr"] = "fast"
open("edited/results.jsonl", "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
expect_error 3 "edited/results.jsonl: line 2 has no \"group\"" "$EMBCACHE" report edited
sed -i 2d edited/results.jsonl
expect_error 3 "edited/results.jsonl: line 2: \"lr\" is a string, not a number" "$EMBCACHE" report edited
[[ ! -e edited/report.html ]] || fail "a refused report wrote report.html"
}

scenario_diverge() {
# A learning rate that diverges costs only its own run: the others of the pass finish, the
# study goes on, and the results say which run diverged.
cat >diverge.json <<'JSON'
{
  "version": 1,
  "output_dir": "out-diverge",
  "precompute": [ { "name": "enc", "encoder": "data/demo_encoder.pt", "dataset": "data/fashion_mnist.h5", "scale": 0.00392157 } ],
  "probes": [
    { "name": "sgd", "cache": "enc", "task": "classification", "levels": 1, "optimizer": "sgd", "schedule": "constant",
      "lr": [1e38, 0.01], "epochs": 2 },
    { "name": "after", "cache": "enc", "task": "classification", "levels": 0, "epochs": 1 }
  ]
}
JSON
"$EMBCACHE" run diverge.json >diverge.txt 2>diverge.err || fail "a diverging run stopped the study: $(cat diverge.err)"
grep -q "warning: training diverged: the loss of linear levels=1 lr=1e+38 wd=0 is not finite in epoch 1; it has no result" diverge.err ||
  fail "no divergence warning: $(cat diverge.err)"
grep -q "sgd/lr=1e+38 (diverged in epoch 1)  *-  *-" diverge.txt || fail "results table: $(cat diverge.txt)"
"$PYTHON" - <<'PY' || fail "results of a study with a diverged run"
import csv, glob, json
rows = {r["name"]: r for r in csv.DictReader(open("out-diverge/results.csv"))}
assert set(rows) == {"sgd/lr=1e+38", "sgd/lr=0.01", "after"}, rows.keys()
bad, good = rows["sgd/lr=1e+38"], rows["sgd/lr=0.01"]
assert bad["diverged_epoch"] == "1" and bad["val_accuracy"] == "" and good["diverged_epoch"] == "", (bad, good)
assert float(good["val_accuracy"]) > 0 and float(rows["after"]["val_accuracy"]) > 0
[bad_dir] = glob.glob("out-diverge/runs/sgd/*1e_38*")
assert not glob.glob(bad_dir + "/head.pt") and json.load(open(bad_dir + "/metrics.json"))["run"]["diverged_epoch"] == 1
PY
grep -q "(diverged in epoch 1)" out-diverge/report.html || fail "the report does not say which run diverged"
echo "ok: a diverging learning rate costs only its own run"
}

scenario_grow() {
# Results follow the cache: when a precompute changes rows (here one window's pixels), the
# finished runs that read its cache run again; otherwise a rerun trains nothing.
cp data/fashion_mnist.h5 grow.h5
cat >grow.json <<'JSON'
{
  "version": 1,
  "output_dir": "out-grow",
  "precompute": [ { "name": "enc", "encoder": "data/demo_encoder.pt", "dataset": "grow.h5", "scale": 0.00392157 } ],
  "probes": [ { "name": "lin", "cache": "enc", "task": "classification", "levels": 1, "epochs": 1 } ]
}
JSON
"$EMBCACHE" run grow.json >grow1.txt 2>&1 || fail "grow study: $(cat grow1.txt)"
"$EMBCACHE" run grow.json >grow2.txt 2>&1 || fail "grow study rerun: $(cat grow2.txt)"
grep -q "1 probe run (1 finished, 0 to run" grow2.txt || fail "an unchanged cache reran runs: $(cat grow2.txt)"
"$PYTHON" -c 'import h5py; f = h5py.File("grow.h5", "r+"); f["images"][3] = 255 - f["images"][3]'
"$EMBCACHE" run grow.json >grow3.txt 2>&1 || fail "grow study after a change: $(cat grow3.txt)"
grep -q "1 more finished run was trained on rows the precomputes just changed; it runs again" grow3.txt &&
  grep -q "== pass 1/1: lin" grow3.txt || fail "a changed cache did not rerun its runs: $(cat grow3.txt)"
"$PYTHON" - <<'PY' || fail "the ledger records the content a run was trained on"
import h5py, json
rows = [r for r in map(json.loads, open("out-grow/ledger.jsonl")) if "id" in r]
assert len(rows) == 2 and rows[0]["cache_content"] != rows[1]["cache_content"], rows
assert rows[1]["cache_content"] == h5py.File("out-grow/caches/enc.h5")["/"].attrs["content_id"], rows[1]
PY
"$EMBCACHE" run grow.json --dry-run >grow4.txt 2>&1 && grep -q "1 probe run (1 finished, 0 to run" grow4.txt ||
  fail "after the rerun, nothing should be stale: $(cat grow4.txt)"
echo "ok: runs trained on rows a precompute changed run again, and only those"
# An entry edited so that its cache no longer matches: the advice fits a study (no --overwrite,
# whose JSON twin would rebuild the cache at every rerun).
sed -i 's/"scale": 0.00392157/"scale": 0.5/' grow.json
expect_error 3 'grow.json: precompute "enc": .*enc.h5: this cache was made with a different preprocessing; delete it to rebuild it with this entry' \
  "$EMBCACHE" run grow.json
}

scenario_configs() {
# The example studies in configs/ stay valid: each plans its runs against the demo data.
mkdir -p examples/configs
cp "$(dirname "$DEMO_DATA_PY")"/../../configs/*.json examples/configs/
ln -s ../data examples/demo-out
for c in examples/configs/*.json; do
  "$EMBCACHE" run "$c" --dry-run >plan-example.txt 2>&1 || fail "$c: $(cat plan-example.txt)"
  grep -qE "probe runs \(0 finished, [1-9][0-9]* to run" plan-example.txt || fail "$c plans no run: $(head -3 plan-example.txt)"
done
[[ -z $(ls data | grep study-) ]] || fail "--dry-run of an example created its output_dir"
echo "ok: configs/*.json plan cleanly"
}

scenarios=("$@")
((${#scenarios[@]})) || scenarios=(errors study crash ledger diverge grow configs)
for scenario in "${scenarios[@]}"; do
  declare -F "scenario_$scenario" >/dev/null || fail "no scenario $scenario (errors study crash ledger diverge grow configs)"
  "scenario_$scenario"
  echo "e2e_run $scenario: all checks passed"
done
