#!/usr/bin/env bash
# Installs every Debian package embcache's build, tests and demo need (idempotent), then
# configures and builds a Release tree in build/ with ccache. Debian 12 (bookworm), 13 (trixie)
# and testing (forky).
# Usage: scripts/setup.sh [--cuda] [--print-packages]
#   --cuda            Debian 13 only: LibTorch with CUDA (contrib's libtorch-cuda-dev and
#                     python3-torch-cuda, which pull the CUDA 12 libraries, cuDNN's installer and
#                     the driver's libcuda1, and non-free's nvidia-cuda-toolkit, without which
#                     TorchConfig.cmake stops) in place of the CPU one. ~3.6 GB to download, ~9.5 GB
#                     installed. The binary runs on machines without a GPU.
#   --print-packages  prints the package list this machine would get, and does nothing else.
# Environment: BUILD_DIR (build), JOBS (nproc), EMBCACHE_SANITIZE (address,undefined or thread),
#   EMBCACHE_DEBIAN_RELEASE (12, 13 or 14: the release to list packages for, in place of this one's).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=0 print=0
for arg in "$@"; do
  case $arg in
    --cuda) cuda=1 ;;
    --print-packages) print=1 ;;
    *) echo "setup.sh: unknown option $arg (use --cuda or --print-packages)" >&2; exit 2 ;;
  esac
done

release=${EMBCACHE_DEBIAN_RELEASE:-$(. /etc/os-release && echo "${VERSION_ID:-${VERSION_CODENAME:-unknown}}")}
[[ $release == forky ]] && release=14  # testing has no VERSION_ID
# The same package names serve Debian 12, 13 and testing (forky, the future 14; checked on
# 2026-12-01 and 2026-12-04); LibTorch is 1.13.1 / 2.6.0 / 2.14.1, HDF5 1.10.8 / 1.14.5 / 2.2.0,
# GDAL 3.6.2 / 3.10.3 / 3.13.3. slurm-wlm and munge:
# the Slurm executor's commands, and the single-node cluster the tests start (tests/slurm/).
PACKAGES=(
  cmake g++ make ccache pkg-config pmccabe strace
  libopenblas0-openmp
  libhdf5-dev hdf5-tools hdf5-filter-plugin hdf5-filter-plugin-blosc-serial
  libcli11-dev nlohmann-json3-dev doctest-dev libssl-dev
  libgdal-dev gdal-bin python3-gdal
  python3-h5py python3-numpy python3-sklearn
  dataset-fashion-mnist
  slurm-wlm munge
)
if ((cuda)); then
  if [[ $release != 13 ]]; then
    echo "setup.sh: --cuda needs Debian 13 (this is Debian $release, whose LibTorch has no CUDA build); on a" \
      "machine with a CUDA PyTorch build with -DEMBCACHE_TORCH=python instead (docs/install.md)" >&2
    exit 2
  fi
  PACKAGES+=(libtorch-cuda-dev python3-torch-cuda nvidia-cuda-toolkit)
else
  PACKAGES+=(libtorch-dev python3-torch)
fi
if ((print)); then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi
[[ $release == 12 || $release == 13 || $release == 14 ]] ||
  echo "setup.sh: warning: tested on Debian 12, 13 and testing (forky); this is $(. /etc/os-release && echo "$PRETTY_NAME")" >&2

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  if ((cuda)) && ! grep -rqsE "^(Components:|deb ).*contrib.*non-free" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "setup.sh: --cuda needs Debian's contrib and non-free components in the apt sources" \
      "(libtorch-cuda-dev is in contrib, nvidia-cuda-toolkit in non-free)" >&2
    exit 2
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

BUILD_DIR=${BUILD_DIR:-build}

# A real Landsat-7 scene for the rslearn tests: L7_ETMs.tif ships in Debian's r-cran-stars. Only
# the file is needed, so the package is downloaded and unpacked, not installed (it would pull in R).
L7="$BUILD_DIR/testdata/L7_ETMs.tif"
if [[ ! -f $L7 ]]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download r-cran-stars >/dev/null 2>&1 || { apt-get update -qq && apt-get download r-cran-stars >/dev/null; })
  dpkg-deb -x "$tmp"/r-cran-stars_*.deb "$tmp/x"
  mkdir -p "$(dirname "$L7")"
  cp "$(find "$tmp/x" -name L7_ETMs.tif | head -1)" "$L7"
  rm -rf "$tmp"
fi
JOBS=${JOBS:-$(nproc)}
# ccache then keys on paths relative to the checkout, so a fresh clone elsewhere (CI) reuses it.
export CCACHE_BASEDIR="$PWD"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 -DEMBCACHE_TORCH=system \
  "-DEMBCACHE_SANITIZE=${EMBCACHE_SANITIZE:-}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
