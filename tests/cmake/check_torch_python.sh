#!/usr/bin/env bash
# -DEMBCACHE_TORCH=python takes LibTorch from the PyTorch that Python3_EXECUTABLE imports
# (torch.utils.cmake_prefix_path), as on a cluster node with a PyTorch install. A stand-in torch
# package whose cmake_prefix_path is this machine's LibTorch prefix plays that PyTorch; the
# system LibTorch must then not be the one picked up by the default search. A Python without
# torch gets one error naming the Python and what to do. Configure only (no build).
# Usage: check_torch_python.sh SOURCE_DIR TORCH_PREFIX
set -euo pipefail
src=$1 prefix=$2
tmp=$(mktemp -d /tmp/embcache-torch-python-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/site/torch/utils" "$tmp/empty"
: >"$tmp/site/torch/__init__.py"
echo "cmake_prefix_path = '$prefix'" >"$tmp/site/torch/utils/__init__.py"
printf '#!/bin/sh\nPYTHONPATH=%s exec /usr/bin/python3 "$@"\n' "$tmp/site" >"$tmp/python-with-torch"
printf '#!/bin/sh\nPYTHONPATH=%s exec /usr/bin/python3 -S "$@"\n' "$tmp/empty" >"$tmp/python-without-torch"
chmod +x "$tmp"/python-*

cmake -S "$src" -B "$tmp/b1" -DEMBCACHE_TORCH=python -DPython3_EXECUTABLE="$tmp/python-with-torch" \
  -DBUILD_TESTING=OFF >"$tmp/ok.log" 2>&1 || { cat "$tmp/ok.log"; exit 1; }
grep -F "embcache: LibTorch" "$tmp/ok.log"
grep -qF "from python ($tmp/python-with-torch): $prefix/Torch" "$tmp/ok.log" ||
  { echo "FAIL: LibTorch did not come from the stand-in PyTorch's prefix $prefix"; exit 1; }

if cmake -S "$src" -B "$tmp/b2" -DEMBCACHE_TORCH=python -DPython3_EXECUTABLE="$tmp/python-without-torch" \
  -DBUILD_TESTING=OFF >"$tmp/bad.log" 2>&1; then
  echo "FAIL: configure passed with a Python that has no torch"; exit 1
fi
grep -qF "python-without-torch cannot import torch" "$tmp/bad.log" ||
  { echo "FAIL: the error does not name the Python:"; cat "$tmp/bad.log"; exit 1; }
grep -qF "docs/install.md" "$tmp/bad.log" || { echo "FAIL: the error does not say where to read on"; exit 1; }
echo "ok: EMBCACHE_TORCH=python found LibTorch through Python's torch, and a Python without torch is named"
