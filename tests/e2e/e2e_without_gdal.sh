#!/usr/bin/env bash
# A build without GDAL (-DEMBCACHE_GDAL=OFF): array datasets precompute as usual, an rslearn
# dataset is refused in one line that says how to get GDAL, and --version says GDAL is absent.
source "$(dirname "$0")/lib.sh"

"$EMBCACHE" --version | grep -qx "GDAL none (built with the same)" || fail "--version: $("$EMBCACHE" --version)"
fx dataset data.h5 --n 2 --height 16 --width 16 --dtype uint8
"$EMBCACHE" precompute --encoder "$ENC/multi_scripted.pt" --dataset data.h5 --out c.h5 --quiet --no-fsync
# One rslearn window with its Sentinel-2 layer marked complete: everything but the raster itself.
mkdir -p rs/windows/default/w1/layers/s2/B1
cat >rs/windows/default/w1/metadata.json <<'JSON'
{"group": "default", "name": "w1", "bounds": [0, 0, 16, 16],
 "projection": {"crs": "EPSG:32610", "x_resolution": 10, "y_resolution": -10}}
JSON
touch rs/windows/default/w1/layers/s2/completed
expect_error 2 "built without GDAL (-DEMBCACHE_GDAL=OFF), so it cannot read rslearn rasters; rebuild with GDAL" \
  "$EMBCACHE" precompute --encoder "$ENC/multi_scripted.pt" --dataset rs --format rslearn --layers s2:B1 --out r.h5 --quiet
[[ ! -e r.h5 ]] || fail "a refused dataset left r.h5 behind"
echo "e2e_without_gdal: all checks passed"
