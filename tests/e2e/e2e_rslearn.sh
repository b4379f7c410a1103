#!/usr/bin/env bash
# rslearn datasets end to end: windows, layers and labels read through GDAL equal what
# python3-gdal reads from the same GeoTIFFs, fed through the same encoder in Python (max relative
# error <= 1e-6), for synthetic windows (uint16, float32 with nodata, a hashed band-set
# directory, two groups with the same window name, an incomplete window) and a real Landsat-7
# scene; filters; every malformed case gets one clear line.
source "$(dirname "$0")/lib.sh"
: "${RSLEARN_PY:?run through ctest}" "${L7_TIF:?}"
rs() { "$PYTHON" "$RSLEARN_PY" "$@"; }

rs synthetic ds expected.h5 origins.json
fx encoders enc4 --channels 4 >/dev/null
LAYERS="sentinel2:B02,B_08,B04 dem:elevation"
"$EMBCACHE" precompute --encoder enc4/multi_scripted.pt --dataset ds --layers "$LAYERS" --label-layer landcover \
  --crop-size 32 --overlap 4 --scale 0.0001 --batch-size 5 --out seg.h5 --quiet --no-fsync --summary-json seg.json
fx compare seg.h5 expected.h5 enc4/multi_scripted.pt --crop-size 32 --overlap 4 --scale 0.0001 --batch-size 5 --origins origins.json
rs labels seg.h5 expected.h5 origins.json --crop-size 32
"$PYTHON" - <<'PY' || fail "summary of the rslearn precompute"
import json, h5py
s = json.load(open("seg.json"))
assert s["windows"] == 4 and s["windows_skipped"] == {"a needed layer is not completed": 1}, s
with h5py.File("seg.h5") as f:
    keys = set(zip(f["index/group"].asstr()[:], f["index/window"].asstr()[:]))
    assert keys == {("g1", "w0"), ("g2", "w0"), ("g1", "w1"), ("g2", "w2")}, keys
    b = f["index/bounds"][:]
    assert b[:, 0].min() == -64 and b[:, 1].min() == -300, "bounds must be absolute pixel coordinates"
print("ok: 4 windows (same name in two groups kept apart), 1 incomplete window skipped, absolute bounds")
PY
"$EMBCACHE" inspect seg.h5 >inspect.txt
grep -q "dataset: .*/ds (rslearn)" inspect.txt || fail "inspect: dataset source: $(cat inspect.txt)"
grep -q "layers: sentinel2:B02,B_08,B04 dem:elevation   labels from: landcover" inspect.txt || fail "inspect: layers: $(cat inspect.txt)"
grep -q "splits (crops / windows): train=18/2 val=18/2" inspect.txt || fail "inspect: splits: $(cat inspect.txt)"
grep -qE "labels: masks /labels/mask \(ignore_index [0-9-]+\)$" inspect.txt || fail "inspect: labels: $(cat inspect.txt)"

# Vector labels: a GeoJSON property, class names sorted and recorded in the cache.
"$EMBCACHE" precompute --encoder enc4/multi_scripted.pt --dataset ds --layers "$LAYERS" --label-layer label \
  --label-property category --crop-size 32 --out cls.h5 --quiet --no-fsync
rs labels cls.h5 expected.h5 origins.json --crop-size 32 | grep -q '"class_names": \["forest", "urban", "water"\]' || fail "class names"
"$EMBCACHE" inspect cls.h5 | grep -q "labels: class ids /labels/class (3 named: forest urban water)$" || fail "inspect: class names"
"$EMBCACHE" precompute --encoder enc4/multi_scripted.pt --dataset ds --layers "$LAYERS" --label-layer label \
  --label-property score --crop-size 32 --out val.h5 --quiet --no-fsync
"$PYTHON" -c 'import h5py, numpy as np; v = h5py.File("val.h5")["labels/value"][:]; assert np.allclose(v, 0.5), v' || fail "value labels"

# A float raster label layer: per-pixel regression targets, nodata -> NaN; train-probe uses them.
"$EMBCACHE" precompute --encoder enc4/multi_scripted.pt --dataset ds --layers "$LAYERS" --label-layer canopy \
  --crop-size 32 --scale 0.0001 --out reg.h5 --quiet --no-fsync
"$PYTHON" - <<'PY' || fail "per-pixel value labels"
import h5py, json, numpy as np
from osgeo import gdal
origins = json.load(open("origins.json"))
with h5py.File("reg.h5") as c:
    assert "labels/pixel_value" in c and "labels/mask" not in c
    g, w, b, v = c["index/group"].asstr()[:], c["index/window"].asstr()[:], c["index/bounds"][:], c["labels/pixel_value"][:]
    for r in range(len(w)):
        a = gdal.Open(f"ds/windows/{g[r]}/{w[r]}/layers/canopy/height/geotiff.tif").ReadAsArray().astype(np.float32)
        a[a == -9999.0] = np.nan
        ox, oy = origins[f"{g[r]}/{w[r]}"]
        want = a[b[r][1] - oy:b[r][3] - oy, b[r][0] - ox:b[r][2] - ox]
        assert np.array_equal(np.isnan(v[r]), np.isnan(want)) and np.allclose(np.nan_to_num(v[r]), np.nan_to_num(want)), r
    assert np.isnan(v).any()
print("ok: float label raster stored as /labels/pixel_value, nodata as NaN")
PY
"$EMBCACHE" train-probe --cache reg.h5 --out reg-run --task pixel-regression --head linear --levels 1 --epochs 3 \
  --batch-size 8 --quiet >/dev/null
"$PYTHON" -c 'import json, math; m = json.load(open("reg-run/metrics.json")); assert math.isfinite(m["val"]["rmse"]), m["val"]' \
  || fail "pixel-regression on per-pixel values"

# Filters: groups, window names, tags; the split key.
count() { "$PYTHON" -c 'import h5py, sys; f = h5py.File(sys.argv[1]); print(len(set(zip(f["index/group"].asstr()[:], f["index/window"].asstr()[:]))))' "$1"; }
"$EMBCACHE" precompute --encoder enc4/multi_scripted.pt --dataset ds --layers "$LAYERS" --groups g2 --out f1.h5 --quiet --no-fsync
[[ $(count f1.h5) -eq 2 ]] || fail "--groups g2"
"$EMBCACHE" precompute --encoder enc4/multi_scripted.pt --dataset ds --layers "$LAYERS" --window-names w0 --out f2.h5 --quiet --no-fsync
[[ $(count f2.h5) -eq 2 ]] || fail "--window-names w0 (one in each group)"
"$EMBCACHE" precompute --encoder enc4/multi_scripted.pt --dataset ds --layers "$LAYERS" --tags site=a --split-key site \
  --out f3.h5 --quiet --no-fsync
[[ $(count f3.h5) -eq 2 ]] || fail "--tags site=a"
"$PYTHON" -c 'import h5py; s = set(h5py.File("f3.h5")["index/split"].asstr()[:]); assert s == {"a"}, s' || fail "--split-key site"
echo "ok: --groups, --window-names, --tags and --split-key select and split windows"

# A uint8 layer alone keeps uint8 pixels; the result matches Python too.
fx encoders enc3 >/dev/null
"$EMBCACHE" precompute --encoder enc3/multi_scripted.pt --dataset ds --layers rgb:B,G,R --crop-size 64 --out rgb.h5 \
  --scale 0.00392 --quiet --no-fsync --batch-size 4
"$PYTHON" - <<'PY' || fail "uint8 layer reference"
import h5py, json, numpy as np
from osgeo import gdal
origins = json.load(open("origins.json"))
with h5py.File("expected.h5") as e, h5py.File("rgb_expected.h5", "w") as o:
    names, groups = e["names"].asstr()[:], e["groups"].asstr()[:]
    imgs = [gdal.Open(f"ds/windows/{g}/{n}/layers/rgb/R_G_B/geotiff.tif").ReadAsArray()[[2, 1, 0]] for g, n in zip(groups, names)]
    o["images"] = np.stack(imgs).astype(np.uint8)
    for k in ("names", "groups", "splits"):
        o.create_dataset(k, data=e[k].asstr()[:].tolist(), dtype=h5py.string_dtype("utf-8"))
PY
fx compare rgb.h5 rgb_expected.h5 enc3/multi_scripted.pt --crop-size 64 --scale 0.00392 --batch-size 4 --origins origins.json

# A multi-timestep layer (rslearn flattens band c, timestep t to c*T + t): VH's 3 timesteps.
"$EMBCACHE" precompute --encoder enc3/multi_scripted.pt --dataset ds --layers s1:VH --crop-size 64 --out s1.h5 \
  --quiet --no-fsync --batch-size 4
"$PYTHON" - <<'PY' || fail "multi-timestep reference"
import h5py, numpy as np
from osgeo import gdal
with h5py.File("expected.h5") as e, h5py.File("s1_expected.h5", "w") as o:
    names, groups = e["names"].asstr()[:], e["groups"].asstr()[:]
    o["images"] = np.stack([gdal.Open(f"ds/windows/{g}/{n}/layers/s1/VV_VH/geotiff.tif").ReadAsArray()[3:6]
                            for g, n in zip(groups, names)])
    for k in ("names", "groups", "splits"):
        o.create_dataset(k, data=e[k].asstr()[:].tolist(), dtype=h5py.string_dtype("utf-8"))
PY
fx compare s1.h5 s1_expected.h5 enc3/multi_scripted.pt --crop-size 64 --batch-size 4 --origins origins.json
"$EMBCACHE" inspect s1.h5 | grep -q "layers: s1:VH (x3 timesteps)" || fail "inspect: timesteps"

# The same layer read with a time axis (--time-axis): the encoder gets [B, T, C, h, w], bands
# VV, VH at each of the 3 timesteps; mean and std stay per band.
fx encoders enc2 --channels 2 >/dev/null
"$EMBCACHE" precompute --encoder enc2/temporal_scripted.pt --dataset ds --layers s1:VV,VH --time-axis --crop-size 64 \
  --out s1t.h5 --quiet --no-fsync --batch-size 4 --mean 0.5,-0.5 --std 2
"$PYTHON" - <<'PY' || fail "time-axis reference"
import h5py, numpy as np
from osgeo import gdal
with h5py.File("expected.h5") as e, h5py.File("s1t_expected.h5", "w") as o:
    names, groups = e["names"].asstr()[:], e["groups"].asstr()[:]
    flat = [gdal.Open(f"ds/windows/{g}/{n}/layers/s1/VV_VH/geotiff.tif").ReadAsArray() for g, n in zip(groups, names)]
    o["images"] = np.stack([a.reshape(2, 3, a.shape[1], a.shape[2]).transpose(1, 0, 2, 3) for a in flat])
    for k in ("names", "groups", "splits"):
        o.create_dataset(k, data=e[k].asstr()[:].tolist(), dtype=h5py.string_dtype("utf-8"))
PY
fx compare s1t.h5 s1t_expected.h5 enc2/temporal_scripted.pt --crop-size 64 --batch-size 4 --origins origins.json \
  --mean 0.5,-0.5 --std 2 --tolerance 1e-5
"$EMBCACHE" inspect s1t.h5 | grep -q "3 time steps" || fail "inspect: time steps"
expect_error 2 "has no time axis: the layers read have one timestep each" "$EMBCACHE" precompute \
  --encoder enc2/temporal_scripted.pt --dataset ds --layers "sentinel2:B02,B04" --time-axis --crop-size 64 --out t1.h5 --quiet
expect_error 2 "a time axis needs the same number in every layer read" "$EMBCACHE" precompute \
  --encoder enc2/temporal_scripted.pt --dataset ds --layers "s1:VV dem:elevation" --time-axis --crop-size 64 --out t2.h5 --quiet

# A real scene: Landsat-7 (6 bands, uint8, SIRGAS 2000 / UTM 25S) placed as one window.
rs landsat "$L7_TIF" l7 l7_expected.h5 l7_origins.json
fx encoders enc6 --channels 6 >/dev/null
"$EMBCACHE" precompute --encoder enc6/multi_scripted.pt --dataset l7 --layers landsat:B1,B2,B3,B4,B5,B6 --crop-size 64 \
  --overlap 8 --scale 0.00392 --batch-size 4 --out l7.h5 --quiet --no-fsync
fx compare l7.h5 l7_expected.h5 enc6/multi_scripted.pt --crop-size 64 --overlap 8 --scale 0.00392 --batch-size 4 --origins l7_origins.json

# Nodata in a uint8 layer, with a --pad-value uint8 cannot hold: read in float, nodata -> -1,
# equal to the reference built from the same GeoTIFFs.
fx encoders enc1 --channels 1 >/dev/null
"$EMBCACHE" precompute --encoder enc1/multi_scripted.pt --dataset ds --layers landcover:class --pad-value -1 \
  --crop-size 48 --batch-size 4 --out lc.h5 --quiet --no-fsync
"$PYTHON" - <<'PY'
import h5py, json, numpy as np
from osgeo import gdal
with h5py.File("lc.h5") as c:
    keys = sorted(set(zip(c["index/group"].asstr()[:], c["index/window"].asstr()[:])))
images = []
for g, w in keys:
    ds = gdal.Open(f"ds/windows/{g}/{w}/layers/landcover/class/geotiff.tif")
    band = ds.GetRasterBand(1)
    x = band.ReadAsArray().astype(np.float32)
    x[x == band.GetNoDataValue()] = -1.0
    images.append(x[None])
text = h5py.string_dtype("utf-8")
with h5py.File("lc-expected.h5", "w") as f:
    f["images"] = np.stack(images)
    f.create_dataset("groups", data=[g for g, _ in keys], dtype=text)
    f.create_dataset("names", data=[w for _, w in keys], dtype=text)
PY
fx compare lc.h5 lc-expected.h5 enc1/multi_scripted.pt --crop-size 48 --pad-value -1 --batch-size 4 --origins origins.json

# Malformed datasets and options: one line each.
broken() { rm -rf "bad-$1"; cp -r ds "bad-$1"; rs break "bad-$1" "$1"; }
pre() { "$EMBCACHE" precompute --encoder enc4/multi_scripted.pt --out bad.h5 --quiet --no-fsync "$@"; }
broken missing-bounds
expect_error 3 'bad-missing-bounds/windows/g1/w0/metadata.json: field "bounds" is missing' pre --dataset bad-missing-bounds --layers "$LAYERS"
broken unknown-crs
expect_error 3 'projection.crs "EPSG:99999999" is not a CRS GDAL knows' pre --dataset bad-unknown-crs --layers "$LAYERS"
broken size-mismatch
expect_error 3 "elevation/geotiff.tif: covers pixels .* but the window's bounds are \[100, -300, 164, -236\]" pre --dataset bad-size-mismatch --layers "$LAYERS"
broken missing-band
expect_error 3 "B04_B03_B02/geotiff.tif: needs band 3 but the GeoTIFF has 2" pre --dataset bad-missing-band --layers "$LAYERS"
broken corrupt
expect_error 3 "elevation/geotiff.tif: cannot" pre --dataset bad-corrupt --layers "$LAYERS"
broken smaller-window
expect_error 2 "--crop-size: bad-smaller-window has windows of different sizes (g1/w0 is 48x40, g1/w1 is 64x64); without --crop-size a crop is a whole window and a cache holds crops of one size: give --crop-size (the smallest window is 48x40)" \
  pre --dataset bad-smaller-window --layers "$LAYERS"
"$EMBCACHE" precompute --encoder enc4/multi_scripted.pt --dataset bad-smaller-window --layers "$LAYERS" --crop-size 32 \
  --out sizes.h5 --quiet --no-fsync
broken sqlite
expect_error 3 "keeps its windows in SQLite (windows.sqlite3), which embcache does not read yet" pre --dataset bad-sqlite --layers "$LAYERS"
expect_error 3 "layer sentinel2 has no band B99" pre --dataset ds --layers sentinel2:B99
expect_error 2 "--layers: required for rslearn datasets" pre --dataset ds
expect_error 2 "--layers: expected LAYER:BAND" pre --dataset ds --layers sentinel2
expect_error 2 "--label-property: required with the vector label layer label" pre --dataset ds --layers "$LAYERS" --label-layer label
expect_error 3 'class "urban" is not in --classes forest,water' pre --dataset ds --layers "$LAYERS" --label-layer label --label-property category --classes forest,water
expect_error 2 "--layers: applies to rslearn datasets" pre --dataset expected.h5 --layers "$LAYERS"
[[ ! -e bad.h5 ]] || fail "a failed precompute left a cache"
echo "e2e_rslearn: all checks passed"
