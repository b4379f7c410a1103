#!/usr/bin/env bash
# A prefix for building embcache on a node that has PyTorch but no apt (a GPU node, a container),
# made on a Debian machine where scripts/setup.sh has run: the headers and CMake files of HDF5,
# CLI11, nlohmann_json, doctest and OpenSSL, link-time copies of libhdf5, libcrypto and libssl, and
# in DIR/lib the runtime libraries of HDF5 (with everything they load but glibc).
# scripts/check_gpu_node.sh builds with it; by hand, see docs/install.md ("Debian packages unpacked
# into a prefix"). Files only, no symbolic links: the prefix survives any copy.
# Usage: scripts/env/node_prefix.sh DIR   (DIR is replaced; ~35 MB; node-prefix/ is git-ignored for it)
set -euo pipefail
DIR=${1:?usage: scripts/env/node_prefix.sh DIR}
ARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
HDF5=/usr/lib/$ARCH/libhdf5_serial.so.103
for f in /usr/include/hdf5/serial/hdf5.h /usr/include/CLI/CLI.hpp /usr/include/nlohmann/json.hpp \
         /usr/include/doctest/doctest.h /usr/include/openssl/sha.h "$HDF5"; do
  [[ -e $f ]] || { echo "node_prefix: $f is missing; run scripts/setup.sh first (Debian 12)" >&2; exit 1; }
done
rm -rf "$DIR"
mkdir -p "$DIR/prefix/include" "$DIR/prefix/lib/cmake" "$DIR/prefix/share/cmake" "$DIR/lib"
cp -a /usr/include/hdf5/serial/. "$DIR/prefix/include/"
cp -a /usr/include/CLI /usr/include/nlohmann /usr/include/doctest /usr/include/openssl "$DIR/prefix/include/"
cp /usr/include/"$ARCH"/openssl/*.h "$DIR/prefix/include/openssl/"
cp -a /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$DIR/prefix/share/cmake/"
cp -a /usr/lib/cmake/doctest "$DIR/prefix/lib/cmake/"
# Debian's doctest targets name /usr; the others find their prefix from where they lie.
sed -i 's|set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  "$DIR/prefix/lib/cmake/doctest/doctestTargets.cmake"
# Link-time names; at run time the binary asks for their sonames (libhdf5_serial.so.103, libcrypto.so.3).
cp -L "$HDF5" "$DIR/prefix/lib/libhdf5.so"
cp -L /usr/lib/"$ARCH"/libcrypto.so.3 "$DIR/prefix/lib/libcrypto.so"
cp -L /usr/lib/"$ARCH"/libssl.so.3 "$DIR/prefix/lib/libssl.so"
# Run time: HDF5 and what it loads, except the C library itself. check_gpu_node.sh drops those the
# node has of its own.
cp -L "$HDF5" /usr/lib/"$ARCH"/libcrypto.so.3 /usr/lib/"$ARCH"/libssl.so.3 "$DIR/lib/"
ldd "$HDF5" | awk '$3 ~ /^\// {print $3}' | grep -vE "/(libc|libm|libresolv|libpthread|libdl|librt|ld-linux[^/]*)\.so" |
  while read -r f; do cp -L "$f" "$DIR/lib/"; done
echo "node_prefix: $DIR ($(du -sh "$DIR" | cut -f1)): prefix/ for CMAKE_PREFIX_PATH, lib/ for the binaries' RPATH"
