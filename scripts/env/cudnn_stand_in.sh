#!/usr/bin/env bash
# Run inside a Debian 13 root (scripts/env/debian_root.sh trixie --cuda does): installs contrib's CUDA
# LibTorch with a stand-in for cuDNN.
#
# Why: libtorch-cuda-2.6 depends on nvidia-cudnn, which is not cuDNN but a script that downloads it
# from developer.download.nvidia.com when the package is configured. Machines that reach only
# Debian's mirror (ours) cannot configure it, so apt leaves LibTorch half-installed. The stand-in is
# a package of that name whose libcudnn.so.9 defines every cuDNN function LibTorch calls, each
# failing with CUDNN_STATUS_NOT_INITIALIZED. It lets the CUDA build link and run on a machine
# without a GPU, where cuDNN is never called. It is not cuDNN: on a GPU machine install the real one.
set -euo pipefail
work=$(mktemp -d)
cd "$work"
apt-get update -qq
apt-get download libtorch-cuda-2.6 >/dev/null
dpkg-deb -x libtorch-cuda-2.6_*.deb lib
find lib -name '*.so*' -type f -exec nm -D --undefined-only {} + 2>/dev/null |
  awk '$NF ~ /^cudnn[A-Za-z0-9_]*(@.*)?$/ {sub(/@.*/, "", $NF); print $NF}' | sort -u >symbols
[[ -s symbols ]] || { echo "cudnn_stand_in.sh: LibTorch imports no cuDNN symbol; nothing to stand in for" >&2; exit 1; }
{
  echo '/* Stand-in cuDNN (scripts/env/cudnn_stand_in.sh): every call fails. */'
  echo 'const char* cudnnGetErrorString(int status) { (void)status; return "cuDNN stand-in: not cuDNN (embcache build check)"; }'
  grep -vx cudnnGetErrorString symbols | sed 's/.*/int &(void) { return 1; }/'
} >cudnn_stand_in.c
# LibTorch imports them with the version node NVIDIA's library defines (cudnnCreate@libcudnn.so.9).
echo 'libcudnn.so.9 { global: cudnn*; local: *; };' >cudnn.map
mkdir -p pkg/DEBIAN pkg/usr/lib/x86_64-linux-gnu
gcc -shared -fPIC -O1 -Wl,-soname,libcudnn.so.9 -Wl,--version-script=cudnn.map \
  -o pkg/usr/lib/x86_64-linux-gnu/libcudnn.so.9 cudnn_stand_in.c
ln -s libcudnn.so.9 pkg/usr/lib/x86_64-linux-gnu/libcudnn.so
cat >pkg/DEBIAN/control <<CONTROL
Package: nvidia-cudnn
Version: 9.0.0.312~cuda12+embcache.stand.in
Architecture: amd64
Maintainer: embcache <embcache@localhost>
Provides: libcudnn.so, libcudnn.so.9, libcudnn-dev
Description: stand-in for cuDNN 9 whose every function fails ($(wc -l <symbols) functions)
 Made by embcache's scripts/env/cudnn_stand_in.sh to check the CUDA build where no GPU is.
CONTROL
dpkg-deb --build --root-owner-group pkg nvidia-cudnn-stand-in.deb >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  "$work/nvidia-cudnn-stand-in.deb" libtorch-cuda-dev python3-torch-cuda >/dev/null
echo "cudnn_stand_in.sh: CUDA LibTorch installed with a stand-in cuDNN ($(wc -l <symbols) functions)"
cd / && rm -rf "$work"
