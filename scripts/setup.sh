#!/usr/bin/env bash
# Installs every Debian package embcache's build, tests and demo need (idempotent),
# then configures and builds a Release tree in build/ with ccache.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  cmake g++ make ccache pkg-config pmccabe
  libtorch-dev libopenblas0-openmp
  libhdf5-dev hdf5-tools hdf5-filter-plugin hdf5-filter-plugin-blosc-serial
  libcli11-dev nlohmann-json3-dev doctest-dev libssl-dev
  libgdal-dev gdal-bin python3-gdal
  python3-torch python3-h5py python3-numpy
  dataset-fashion-mnist
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
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
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 \
  "-DEMBCACHE_SANITIZE=${EMBCACHE_SANITIZE:-}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
