#!/usr/bin/env bash
# The CUDA build, checked where no GPU is: in a fresh Debian 13 root with contrib's CUDA LibTorch
# (scripts/setup.sh --cuda: libtorch-cuda-dev and python3-torch-cuda 2.6.0, CUDA 12.4), embcache
# compiles, links libtorch_cuda (so that CUDA registers at start-up), reports its CUDA in
# --version, and passes the whole suite on the CPU. Tests that need a GPU check for one.
# The root (~10 GB) is kept under EMBCACHE_ROOTS and reused while its package list is unchanged.
# Usage: scripts/env/check_cuda_build.sh [CTEST_ARGS...]   (as root; JOBS sets the parallelism)
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$SECONDS
JOBS=${JOBS:-$(nproc)} BUILD_DIR=build-cuda scripts/env/debian_root.sh trixie --cuda -- bash -c '
  set -euo pipefail
  scripts/setup.sh --cuda
  bin=build-cuda/apps/embcache/embcache
  "$bin" --version | tee build-cuda/version.txt
  # A linker with --as-needed drops a library whose symbols nothing calls; libtorch_cuda registers
  # CUDA from its static initialisers, so without it the binary would be CPU-only.
  readelf -d "$bin" | grep -q "NEEDED.*libtorch_cuda" ||
    { echo "check_cuda_build: $bin does not link libtorch_cuda" >&2; exit 1; }
  grep -q "^CUDA: LibTorch built with CUDA 12" build-cuda/version.txt ||
    { echo "check_cuda_build: --version does not report a CUDA LibTorch" >&2; exit 1; }
  cd build-cuda && ctest --output-on-failure -j "$JOBS" --timeout 900 "$@"
' check_cuda_build "$@"
echo "check_cuda_build: passed in $((SECONDS - start)) s"
