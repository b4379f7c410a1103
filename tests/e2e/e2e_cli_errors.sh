#!/usr/bin/env bash
# Through the real binary: each bad input gives one stderr line naming the file/field and a
# non-zero exit, with no abort or backtrace; disk full and Ctrl-C lose nothing committed.
source "$(dirname "$0")/lib.sh"

fx dataset data.h5 --n 6 --height 32 --width 32 --dtype uint8 --masks --splits
fx dataset dup.h5 --n 4 --duplicate-names
"$PYTHON" - <<'PY'
import h5py, numpy as np
with h5py.File("noimages.h5", "w") as f:
    f["pixels"] = np.zeros((2, 3, 8, 8), np.uint8)
with h5py.File("rank3.h5", "w") as f:
    f["images"] = np.zeros((2, 8, 8), np.uint8)
with h5py.File("nanpixel.h5", "w") as f:
    x = np.ones((3, 3, 8, 8), np.float32)
    x[1, 2, 3, 4] = np.nan  # nodata written as NaN
    f["images"] = x
with h5py.File("norows.h5", "w") as f:
    f["images"] = np.zeros((0, 3, 8, 8), np.uint8)
with h5py.File("badlabels.h5", "w") as f:
    f["images"] = np.zeros((3, 3, 8, 8), np.uint8)
    f["labels"] = np.zeros(2, np.int64)
PY
echo "not hdf5" >text.h5
RUN=("$EMBCACHE" precompute --quiet --no-fsync --batch-size 4)

# Command line
expect_error 2 'unknown subcommand "precompte"; choose one of precompute, train-probe' "$EMBCACHE" precompte --encoder x.pt
expect_error 2 "A subcommand is required" "$EMBCACHE"
expect_error 2 "encoder is required (see embcache precompute --help)" "$EMBCACHE" precompute --dataset data.h5 --out c.h5
# A mistyped option is named, even while a required one is missing too (CLI11 reports the
# missing one first).
expect_error 2 "unknown option --learning-rate (see embcache train-probe --help)" \
  "$EMBCACHE" train-probe --cache c.h5 --learning-rate 0.1
expect_error 2 "unknown option --datset (see embcache precompute --help)" \
  "$EMBCACHE" precompute --encoder x.pt --datset=data.h5 --out c.h5
expect_error 2 "dtype" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out c.h5 --dtype float64
expect_error 2 "compression" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out c.h5 --compression zip
expect_error 2 "stage-priority" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out c.h5 --stage-priority fast
expect_error 2 "overlap" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out c.h5 --crop-size 8 --overlap 8
expect_error 2 "band 5 is out of range" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out c.h5 --bands 0,1,5
expect_error 2 "no level \"9\"" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out c.h5 --levels 9
# Encoders
expect_error 3 "encoder file not found" "${RUN[@]}" --encoder nope.pt --dataset data.h5 --out c.h5
expect_error 3 ": is a directory; pass a TorchScript file" "${RUN[@]}" --encoder . --dataset data.h5 --out c.h5
expect_error 3 "not a loadable TorchScript" "${RUN[@]}" --encoder "$ENC/not_torchscript.pt" --dataset data.h5 --out c.h5
# A disk that fails while the encoder is read: an I/O error with the system's reason (exit 4), not
# advice to save the encoder again. strace fails its first open (the hash) and then its second
# (LibTorch's reader); LeakSanitizer cannot run under ptrace.
cp "$ENC/light.pt" eio.pt
for n in 1 2; do
  expect_error 4 "eio.pt: cannot .*: Input/output error" env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    strace -f -qq -o /dev/null -e trace=openat -P "$PWD/eio.pt" -e inject=openat:error=EIO:when=$n \
    "${RUN[@]}" --encoder "$PWD/eio.pt" --dataset data.h5 --out eio.h5
done
expect_error 3 "Dict output has the key \"stage/1\", which cannot name a level" "${RUN[@]}" --encoder "$ENC/bad_key.pt" --dataset data.h5 --out c.h5
expect_error 3 "1 dimensions" "${RUN[@]}" --encoder "$ENC/bad_rank.pt" --dataset data.h5 --out c.h5
# The cause from TorchScript's interpreter, not its "The following operation failed" opening line.
# (An optimised encoder's first call is the check of its difference from the plain one, on 2 crops.)
expect_error 3 "forward failed on a batch of shape \[2, 2, 32, 32\]: RuntimeError: .*expected input\[2, 2, 32, 32\] to have 3 channels" \
  "${RUN[@]}" --encoder "$ENC/conv_bn.pt" --dataset data.h5 --out c.h5 --bands 0,1 --optimize
expect_error 3 "forward failed on a batch of shape \[4, 2, 32, 32\]: RuntimeError: .*expected input\[4, 2, 32, 32\] to have 3 channels" \
  "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out c.h5 --bands 0,1 --no-optimize
expect_error 3 "crop default/w1\[0,0,8,8\] has NaN/Inf input pixels (after preprocessing), so level 0 has NaN/Inf features; fill them" \
  "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset nanpixel.h5 --out nf.h5 --no-optimize
# An optimised encoder turns NaN into numbers (oneDNN's fused ReLU maps it to 0): the pixels are
# refused before they are encoded. The default runs it as loaded, which --allow-nonfinite needs.
expect_error 3 "crop default/w1\[0,0,8,8\] has NaN/Inf input pixels (after preprocessing), which the optimised encoder would turn into finite features; fill them.*or pass --no-optimize" \
  "${RUN[@]}" --encoder "$ENC/conv_bn.pt" --dataset nanpixel.h5 --out nf.h5 --optimize
# --allow-nonfinite asks to store the NaN features the pixels make; optimised, they would be numbers.
expect_error 3 "crop default/w1\[0,0,8,8\] has NaN/Inf input pixels (after preprocessing), which the optimised encoder would turn into finite features" \
  "${RUN[@]}" --encoder "$ENC/conv_bn.pt" --dataset nanpixel.h5 --out nf.h5 --optimize --allow-nonfinite
"${RUN[@]}" --encoder "$ENC/conv_bn.pt" --dataset nanpixel.h5 --out nf-allowed.h5 --allow-nonfinite \
  --summary-json nf-allowed.json >/dev/null 2>&1 || fail "--allow-nonfinite on NaN pixels"
"$PYTHON" -c 'import json, sys; assert json.load(open("nf-allowed.json"))["encoder_optimized"] is False' ||
  fail "--allow-nonfinite: a new cache's encoder was optimised"
"$PYTHON" -c 'import h5py, numpy as np; assert np.isnan(h5py.File("nf-allowed.h5")["levels/0"][:]).any()' ||
  fail "--allow-nonfinite: the NaN pixels did not give NaN features"
expect_error 3 "level 0 of crop default/w" "${RUN[@]}" --encoder "$ENC/nonfinite.pt" --dataset data.h5 --out nf.h5
# Datasets
expect_error 3 "missing dataset /images" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset noimages.h5 --out c.h5
expect_error 3 "norows.h5: no window to read (/images has 0 rows)" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset norows.h5 --out c.h5
expect_error 3 "rank 3" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset rank3.h5 --out c.h5
expect_error 3 "both \"win0\"" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset dup.h5 --out c.h5
expect_error 3 "/labels has shape \[2\]" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset badlabels.h5 --out c.h5
expect_error 3 "not an HDF5 file" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset text.h5 --out c.h5
mkdir -p rslearn_root/windows plain_dir
expect_error 2 "--layers: required for rslearn datasets" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset rslearn_root --out c.h5
expect_error 3 "no window to read" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset rslearn_root --layers s2:B1 --out c.h5
expect_error 3 "is a directory but not an rslearn dataset" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset plain_dir --out c.h5
# Outputs
expect_error 4 "does not exist" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out missing/dir/c.h5
expect_error 4 "summary-json missing/s.json: directory .*missing does not exist; create it first" \
  "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out c.h5 --summary-json missing/s.json
expect_error 3 "not an embcache cache" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out text.h5
expect_error 2 "is the dataset itself" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out data.h5
cp data.h5 other-data.h5
expect_error 3 "never replaces other files" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out other-data.h5 --overwrite
expect_error 3 "never replaces other files" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out text.h5 --overwrite
cmp -s data.h5 other-data.h5 || fail "--overwrite touched a file that is not a cache"
[[ $(cat text.h5) == "not hdf5" ]] || fail "--overwrite touched a text file"
"${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out good.h5 >/dev/null
expect_error 3 "different encoder_sha256; .*PYTHONHASHSEED=0" "${RUN[@]}" --encoder "$ENC/multi_traced.pt" --dataset data.h5 --out good.h5
expect_error 3 "different preprocessing; use another --out" "${RUN[@]}" --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out good.h5 --scale 2
! grep -q PYTHONHASHSEED "$WORK/err.txt" || fail "the re-export hint is only for a changed encoder file"
expect_error 3 "not an embcache cache; pass a cache written by 'embcache precompute'" "$EMBCACHE" inspect data.h5
expect_error 3 "no such cache" "$EMBCACHE" inspect nothing.h5
expect_error 3 "nothing.h5: no such file; pass a cache" "$EMBCACHE" train-probe --cache nothing.h5 --out p --task classification --levels 0
[[ ! -e c.h5 && ! -e nf.h5 ]] || fail "a failed run left a cache file"

# Disk full: a file-size limit makes writes fail with EFBIG part-way (ulimit -f limits each
# file). The run fails with one line, what was committed stays, and a rerun finishes the job.
fx dataset big.h5 --n 150 --height 64 --width 64 --dtype uint8
BIG=(--encoder "$ENC/light.pt" --dataset big.h5 --crop-size 32 --quiet --batch-size 8)
"$EMBCACHE" precompute "${BIG[@]}" --out full-reference.h5 --no-fsync >/dev/null
disk_full() {  # disk_full OUT [options]: run under a 20 MB file-size limit, expect exit 4
  local out=$1 rc=0
  shift
  (ulimit -f 20000; "$EMBCACHE" precompute "${BIG[@]}" --out "$out" "$@" 2>"$out.err" >/dev/null) || rc=$?
  [[ $rc -eq 4 ]] || fail "disk full: expected exit 4, got $rc: $(cat "$out.err")"
  [[ $(wc -l <"$out.err") -eq 1 ]] || fail "disk full: $(cat "$out.err")"
  grep -q "File too large" "$out.err" || fail "disk full: $(cat "$out.err")"
  echo "ok: disk full: $(cat "$out.err")"
}
skipped_after_rerun() {
  "$EMBCACHE" precompute "${BIG[@]}" --out "$1" --summary-json "$1.json" >/dev/null
  "$PYTHON" -c "import json; print(json.load(open('$1.json'))['crops_skipped'])"
}
# (a) The open segment outgrows the limit: nothing was committed, nothing half-made is kept.
disk_full seg.h5 --segment-mb 64
[[ ! -e seg.h5 ]] || fail "a cache file appeared after a failed first segment"
[[ $(skipped_after_rerun seg.h5) -eq 0 ]] || fail "rows of an uncommitted segment were trusted"
fx same full-reference.h5 seg.h5
# (b) Commits succeed, then the file being built outgrows the limit: every committed crop
# survives (rebuilt from the commit records), and only those are skipped by the rerun.
disk_full cons.h5 --segment-mb 4
committed=$("$PYTHON" -c "
import glob, h5py
print(sum(len(h5py.File(f, 'r')['index/window']) for f in glob.glob('cons.h5.runs/all/seg-*.h5')))")
[[ $committed -gt 0 ]] || fail "no commit record survived the failed run"
skipped=$(skipped_after_rerun cons.h5)
[[ $skipped -eq $committed ]] || fail "the rerun skipped $skipped crops, but $committed were committed"
[[ ! -e cons.h5.runs ]] || fail "the rerun left its commit records behind"
fx same full-reference.h5 cons.h5

# Ctrl-C: stops cleanly, exit 130, everything finished is in the cache, a rerun completes it.
# The signal is sent once the first segment is committed (not after a fixed sleep, which a faster
# pipeline outruns), with most of the 2400 crops still to do.
fx dataset long.h5 --n 600 --height 64 --width 64 --dtype uint8
HEAVY=(--encoder "$ENC/heavy.pt" --dataset long.h5 --crop-size 32 --quiet --batch-size 8)
"$EMBCACHE" precompute "${HEAVY[@]}" --out heavy-reference.h5 --no-fsync >/dev/null
"$EMBCACHE" precompute "${HEAVY[@]}" --out int.h5 --segment-mb 4 >/dev/null 2>int.err &
pid=$!
for _ in $(seq 600); do
  compgen -G "int.h5.runs/all/seg-*.h5" >/dev/null && break
  sleep 0.05
done
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc -eq 130 ]] || fail "Ctrl-C: expected exit 130, got $rc: $(cat int.err)"
grep -q "rerun the same command to finish" int.err || fail "Ctrl-C message: $(cat int.err)"
[[ -e int.h5 && ! -e int.h5.runs ]] || fail "Ctrl-C did not consolidate what was done"
# The cache says it is short, and readers repeat it: a probe must not train on part of a split
# without a word.
"$EMBCACHE" inspect int.h5 >inspect.txt
grep -q "incomplete: the precompute that wrote it was interrupted" inspect.txt || fail "inspect: $(cat inspect.txt)"
# Standard output on a full disk: one line and exit 4, not exit 0 with the description lost.
for args in "inspect int.h5" "inspect int.h5 --json" "--help"; do
  rc=0
  "$EMBCACHE" $args >/dev/full 2>full.err || rc=$?
  [[ $rc -eq 4 && $(wc -l <full.err) -eq 1 ]] && grep -q "cannot write to standard output" full.err ||
    fail "$args to a full disk: exit $rc: $(cat full.err)"
done
PROBE=(train-probe --task classification --levels 0 --val-fraction 0.2 --epochs 1 --quiet)
"$EMBCACHE" "${PROBE[@]}" --cache int.h5 --out probe-short >/dev/null 2>probe.err
grep -q "^embcache: warning: int.h5: the precompute that wrote it was interrupted, so crops are missing; rerun that precompute to finish it (training on the [0-9]* rows it has)$" probe.err || fail "train-probe on a short cache: $(cat probe.err)"
"$PYTHON" -c "import json; assert 'interrupted' in json.load(open('probe-short/metrics.json'))['warnings'][0]"
"$EMBCACHE" precompute "${HEAVY[@]}" --out int.h5 --summary-json int.json >/dev/null
"$PYTHON" -c "import json; j = json.load(open('int.json')); assert j['crops_skipped'] > 0 and j['crops_computed'] > 0, j"
fx same heavy-reference.h5 int.h5
"$PYTHON" -c "import h5py; assert h5py.File('int.h5')['/'].attrs['complete'] == 1"
"$EMBCACHE" "${PROBE[@]}" --cache int.h5 --out probe-full >/dev/null 2>probe.err
[[ ! -s probe.err ]] || fail "train-probe on the finished cache warned: $(cat probe.err)"
# --version: the versions a bug report needs, as the libraries loaded report them (Debian's
# python3-torch, python3-h5py and python3-gdal load the same libraries).
"$EMBCACHE" --version >version.txt
"$PYTHON" - version.txt <<'PY' || fail "--version: $(cat version.txt)"
import re, sys, torch, h5py
text = open(sys.argv[1]).read()
lines = text.splitlines()
assert lines[0].startswith("embcache "), lines
torch_version = re.search(r"^LibTorch (\S+) \(built with", text, re.M).group(1)
assert torch.__version__.startswith(torch_version), (torch_version, torch.__version__)
assert re.search(r"^HDF5 %s \(built with" % re.escape(h5py.version.hdf5_version), text, re.M), text
if re.search(r"^GDAL none \(built with the same\)$", text, re.M):  # -DEMBCACHE_GDAL=OFF
    gdal_version = "none"
else:
    from osgeo import gdal
    gdal_version = gdal.__version__
    assert re.search(r"^GDAL %s \(built with" % re.escape(gdal_version), text, re.M), text
cuda = re.search(r"^CUDA: (.*)$", text, re.M).group(1)
# Debian's python3-torch(-cuda) is the same LibTorch build as libtorch(-cuda)-dev.
if torch.version.cuda is None:
    assert cuda == "none (this LibTorch is a CPU build)", cuda
else:
    assert cuda.startswith("LibTorch built with CUDA %s; " % torch.version.cuda), (cuda, torch.version.cuda)
    assert cuda.endswith("no GPU visible on this machine") == (not torch.cuda.is_available()), cuda
# One OpenMP runtime: LibTorch's workers and embcache's own team are the same library.
openmp = re.search(r"^OpenMP runtime: (\S+)$", text, re.M)
assert openmp and "libgomp" in openmp.group(1), text
print("ok: --version names LibTorch %s, HDF5 %s, GDAL %s and CUDA (%s)" % (torch_version, h5py.version.hdf5_version, gdal_version, cuda))
PY
echo "e2e_cli_errors: all checks passed"
