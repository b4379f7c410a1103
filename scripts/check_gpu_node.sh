#!/usr/bin/env bash
# A GPU node with PyTorch but no apt: builds embcache against that PyTorch's LibTorch (CUDA,
# EMBCACHE_TORCH=python, without GDAL) and the prefix of scripts/env/node_prefix.sh, then runs, each
# only while the time budget lasts:
#   build    configure and build (Ninja, every core); the machine, compiler and PyTorch versions first
#   check    --version, the unit suites (test_cuda.cpp's CUDA case among them) and e2e_cuda
#   probe    scripts/bench_probe.sh sections 6 and 7 on the GPU (dense heads against eager PyTorch
#            on the GPU, the GPU tier)
#   encgpu   scripts/bench_encoders.sh with DEVICE=cuda (MobileNetV2 and ViT-B/16, 3 rounds)
#   enccpu   scripts/bench_encoders.sh on the CPU, 2 threads (MobileNetV2 and ResNet-50, 3 rounds,
#            short runs): the encoder with cores to spare
#   ctest    the whole suite but Slurm's
# Logs go to OUT (default /tmp/embcache-gpu-node): build.log, check.log, one per benchmark,
# ctest.log and results.tgz (the benchmarks' JSON and metrics, from WORK, default
# /tmp/embcache-gpu-node-work).
# Usage: scripts/check_gpu_node.sh PREFIX_DIR [BUDGET_S (default 570)] [STEPS (default all, comma list)]
# BUILD_DIR (default build-node) and PY (default: python3 on the PATH, the one with torch) may be
# set; TORCH_MODE=system builds against the system's LibTorch instead, as on a Debian machine.
set -uo pipefail
cd "$(dirname "$0")/.."
G=$(realpath "${1:?usage: scripts/check_gpu_node.sh PREFIX_DIR [BUDGET_S] [STEPS]}")
BUDGET=${2:-570}
STEPS=",${3:-build,check,probe,encgpu,enccpu,ctest},"
OUT=${OUT:-/tmp/embcache-gpu-node} W=${WORK:-/tmp/embcache-gpu-node-work} B=$(realpath -m "${BUILD_DIR:-build-node}")
mkdir -p "$OUT"
PY=${PY:-$(command -v python3)}
J=$(nproc)
left() { echo $((BUDGET - SECONDS)); }
step() { [[ $STEPS == *",$1,"* ]] && (($(left) >= $2)) && { echo "== $1 at ${SECONDS}s ($(left)s left)"; return 0; }
  echo "== $1 skipped at ${SECONDS}s ($(left)s left, wanted $2)"; return 1; }

NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if step build 60; then
  {
    echo "== machine"; nvidia-smi -L; nproc; free -g | head -2; grep -m1 "model name" /proc/cpuinfo; head -2 /etc/os-release
    g++ --version | head -1; cmake --version | head -1; ninja --version; ldd --version | head -1
    echo "nvcc: $NVCC"; [[ -n $NVCC ]] && "$NVCC" --version | tail -2
    $PY -c "import torch, torchvision, h5py, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'tv', torchvision.__version__, 'h5py', h5py.__version__, 'hdf5', h5py.version.hdf5_version, torch.utils.cmake_prefix_path)"
    ls "$($PY -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/../../lib" | grep -i "gomp\|cuda" | head
  } 2>&1 | tee "$OUT/build.log"
  # Carried runtime libraries: keep only those this machine lacks (HDF5 always).
  for f in "$G"/lib/*; do
    n=$(basename "$f")
    [[ $n == libhdf5_serial* ]] && continue
    if ldconfig -p | awk '{print $1}' | grep -qx "$n" || ls /lib/x86_64-linux-gnu/"$n" /usr/lib/x86_64-linux-gnu/"$n" >/dev/null 2>&1; then
      rm -f "$f"
    fi
  done
  echo "carried libraries kept: $(ls "$G/lib" | tr '\n' ' ')" | tee -a "$OUT/build.log"
  CUDA_HOME=/usr/local/cuda
  [[ -n $NVCC ]] && CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  # The GPU's compute capability (9.0 on a Hopper), for LibTorch's CMake and CUDA's.
  CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
  export TORCH_CUDA_ARCH_LIST=${CAP:-9.0}
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBCACHE_TORCH=${TORCH_MODE:-python} -DPython3_EXECUTABLE="$PY" \
    -DEMBCACHE_GDAL=OFF -DCMAKE_PREFIX_PATH="$G/prefix" -DHDF5_ROOT="$G/prefix" -DHDF5_C_COMPILER_EXECUTABLE=/bin/false \
    -DOPENSSL_ROOT_DIR="$G/prefix" -DCUDAToolkit_ROOT="$CUDA_HOME" -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES="${TORCH_CUDA_ARCH_LIST/./}" -Dnvtx3_dir="$CUDA_HOME/include" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags -Wl,-rpath,$G/lib" >>"$OUT/build.log" 2>&1
  rc=$?
  grep -E "embcache:|HDF5|OpenSSL|CUDA|Torch|Error|error" "$OUT/build.log" | tail -40
  ((rc == 0)) || { echo "configure failed ($rc)"; tail -60 "$OUT/build.log"; exit 1; }
  start=$SECONDS
  cmake --build "$B" -j "$J" --target embcache bench_precompute bench_probe embcache_unit_tests -- -k 0 >>"$OUT/build.log" 2>&1
  rc=$?
  echo "build: rc $rc in $((SECONDS - start)) s"
  grep -E "error|FAILED" "$OUT/build.log" | head -60
  grep -c "warning:" "$OUT/build.log" | sed 's/^/warnings: /'
  ((rc == 0)) || exit 1
fi
E=$B/apps/embcache/embcache

if step check 90; then
  {
    "$E" --version
    ldd "$E" | grep -E "not found|hdf5|torch_cuda|gomp|crypto" | sed 's/^/ldd: /'
    cd "$B" && start=$SECONDS
    ctest -R "fixtures_encoders|^unit_|e2e_cuda" -j "$J" --output-on-failure --timeout 300
    echo "ctest (unit + e2e_cuda): rc $? in $((SECONDS - start)) s"
    grep -E "max \||vs|head.pt|k=|C=|grid|passed|FAIL|skipped" Testing/Temporary/LastTest.log
  } 2>&1 | tee "$OUT/check.log"
fi

if step probe 120; then
  mkdir -p "$W"
  (SECTIONS=6,7 DEVICE=cuda EPOCHS=3 BUILD_DIR=$B PYTHON=$PY timeout $(($(left) - 10)) scripts/bench_probe.sh "$W/probe") 2>&1 |
    tee "$OUT/bench_probe.log"
fi

if step encgpu 130; then
  (DEVICE=cuda REPEATS=3 ONLY=mobilenet_v2,vit_b_16 ROWS=mobilenet_v2=32000,vit_b_16=8000 BUILD_DIR=$B PYTHON=$PY \
    timeout $(($(left) - 10)) scripts/bench_encoders.sh "$W/enc-cuda") 2>&1 | tee "$OUT/bench_encoders_cuda.log"
fi

if step enccpu 110; then
  (DEVICE=cpu THREADS=2 REPEATS=3 ONLY=mobilenet_v2,resnet50 ROWS=mobilenet_v2=3840,resnet50=384 BUILD_DIR=$B PYTHON=$PY timeout $(($(left) - 10)) \
    scripts/bench_encoders.sh "$W/enc-cpu") 2>&1 | tee "$OUT/bench_encoders_cpu.log"
fi

if step ctest 120; then
  (cd "$B" && cmake --build . -j "$J" >/dev/null 2>&1; timeout $(($(left) - 10)) ctest -j "$J" -E "e2e_slurm|cmake_torch_python" \
    --timeout 300 --output-on-failure) 2>&1 | tail -150 >"$OUT/ctest.log"
  grep -E "tests passed|Failed|\*\*\*|Timeout" "$OUT/ctest.log" | head -40
fi
tar czf "$OUT/results.tgz" --exclude="*.h5" --exclude="*.pt" -C "$W" . 2>/dev/null
echo "done at ${SECONDS}s"
