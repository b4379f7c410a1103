#!/usr/bin/python3
"""Small rslearn-layout datasets for the tests, written with python3-gdal, and the pixels the
reader should produce, read back with python3-gdal into an array dataset (the reference).

  rslearn_fixtures.py synthetic ROOT EXPECTED.h5 ORIGINS.json
      two groups with the same window name, uint16 + float32 (nodata) + uint8 layers, a hashed
      band-set directory, a raster label layer (nodata -> ignore), a GeoJSON label layer, and a
      window whose layer is not completed
  rslearn_fixtures.py landsat L7_ETMs.tif ROOT EXPECTED.h5 ORIGINS.json
      the Landsat-7 scene placed as one window (6 bands, uint8, its own UTM CRS)
  rslearn_fixtures.py labels CACHE EXPECTED.h5 ORIGINS.json --crop-size S
      the cache's masks and class labels equal the expected ones, crop by crop
  rslearn_fixtures.py break ROOT KIND     damage a copy of a synthetic dataset (malformed cases)
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

import h5py
import numpy as np
from osgeo import gdal, osr

gdal.UseExceptions()
RES = 10.0
CRS = "EPSG:32610"
PAD = 0.0


def bandset_dirname(bands):
    """rslearn's rule (rslearn/utils/raster_format.py get_bandset_dirname)."""
    if any("_" in b for b in bands):
        return hashlib.sha256(json.dumps(bands).encode()).hexdigest()
    name = "_".join(bands)
    return hashlib.sha256(name.encode()).hexdigest() if len(name) > 64 else name


def write_tif(path, array, bounds, gdal_type, nodata=None, crs=CRS, res=(RES, -RES)):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    c, h, w = array.shape
    ds = gdal.GetDriverByName("GTiff").Create(path, w, h, c, gdal_type, options=["COMPRESS=LZW"])
    ds.SetGeoTransform((bounds[0] * res[0], res[0], 0, bounds[1] * res[1], 0, res[1]))
    srs = osr.SpatialReference()
    srs.SetFromUserInput(crs)
    ds.SetProjection(srs.ExportToWkt())
    for i in range(c):
        band = ds.GetRasterBand(i + 1)
        if nodata is not None:
            band.SetNoDataValue(nodata)
        band.WriteArray(array[i])
    ds = None


def write_window(root, group, name, bounds, split, crs=CRS, res=(RES, -RES)):
    d = os.path.join(root, "windows", group, name)
    os.makedirs(d, exist_ok=True)
    meta = {"group": group, "name": name,
            "projection": {"crs": crs, "x_resolution": res[0], "y_resolution": res[1]},
            "bounds": list(bounds), "time_range": ["2024-01-01T00:00:00+00:00", "2024-02-01T00:00:00+00:00"],
            "options": {"split": split, "site": "a" if group == "g1" else "b"}}
    with open(os.path.join(d, "metadata.json"), "w") as f:
        json.dump(meta, f)
    return d


def read_back(path, bands):
    ds = gdal.Open(path)
    out = []
    for b in bands:
        band = ds.GetRasterBand(b)
        a = band.ReadAsArray().astype(np.float32)
        nd = band.GetNoDataValue()
        if nd is not None:
            a[a == nd] = PAD
        out.append(a)
    return np.stack(out)


CONFIG = {"layers": {
    "sentinel2": {"type": "raster", "band_sets": [{"bands": ["B04", "B03", "B02"], "dtype": "uint16"},
                                                  {"bands": ["B_08"], "dtype": "uint16"}]},
    "dem": {"type": "raster", "band_sets": [{"bands": ["elevation"], "dtype": "float32"}]},
    "rgb": {"type": "raster", "band_sets": [{"bands": ["R", "G", "B"], "dtype": "uint8"}]},
    "s1": {"type": "raster", "band_sets": [{"bands": ["VV", "VH"], "dtype": "float32"}]},
    "landcover": {"type": "raster", "band_sets": [{"bands": ["class"], "dtype": "uint8"}]},
    "canopy": {"type": "raster", "band_sets": [{"bands": ["height"], "dtype": "float32"}]},
    "label": {"type": "vector"}}}

WINDOWS = [("g1", "w0", (100, -300, 164, -236), "train", "forest"),
           ("g2", "w0", (900, 400, 964, 464), "val", "water"),   # same name, other group
           ("g1", "w1", (-64, 0, 0, 64), "train", "water"),
           ("g2", "w2", (0, 0, 64, 64), "val", "urban")]


def synthetic(args):
    rng = np.random.default_rng(3)
    root = args.root
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    images, masks, labels, names, groups, splits, origins = [], [], [], [], [], [], {}
    for group, name, b, split, label in WINDOWS:
        d = write_window(root, group, name, b, split)
        s2 = rng.integers(0, 12000, (3, 64, 64)).astype(np.uint16)
        nir = rng.integers(0, 12000, (1, 64, 64)).astype(np.uint16)
        dem = rng.normal(100, 30, (1, 64, 64)).astype(np.float32)
        dem[0, :5, :7] = -9999.0  # nodata
        rgb = rng.integers(0, 256, (3, 64, 64)).astype(np.uint8)
        s1 = rng.normal(0, 1, (6, 64, 64)).astype(np.float32)  # VV, VH x 3 timesteps, flattened c*T + t
        lc = rng.integers(0, 4, (1, 64, 64)).astype(np.uint8)
        lc[0, 10:20, 30:40] = 255  # nodata -> ignore index
        canopy = (dem / 10.0).astype(np.float32)  # a float label: per-pixel regression target
        canopy[0, 40:50, :8] = -9999.0  # nodata -> NaN (no target)
        layers = os.path.join(d, "layers")
        write_tif(os.path.join(layers, "sentinel2", bandset_dirname(["B04", "B03", "B02"]), "geotiff.tif"), s2, b, gdal.GDT_UInt16)
        write_tif(os.path.join(layers, "sentinel2", bandset_dirname(["B_08"]), "geotiff.tif"), nir, b, gdal.GDT_UInt16)
        write_tif(os.path.join(layers, "dem", "elevation", "geotiff.tif"), dem, b, gdal.GDT_Float32, nodata=-9999.0)
        write_tif(os.path.join(layers, "rgb", "R_G_B", "geotiff.tif"), rgb, b, gdal.GDT_Byte)
        write_tif(os.path.join(layers, "s1", "VV_VH", "geotiff.tif"), s1, b, gdal.GDT_Float32)
        with open(os.path.join(layers, "s1", "VV_VH", "metadata.json"), "w") as f:
            json.dump({"num_channels": 2, "num_timesteps": 3, "timestamps": None}, f)
        write_tif(os.path.join(layers, "landcover", "class", "geotiff.tif"), lc, b, gdal.GDT_Byte, nodata=255)
        write_tif(os.path.join(layers, "canopy", "height", "geotiff.tif"), canopy, b, gdal.GDT_Float32, nodata=-9999.0)
        os.makedirs(os.path.join(layers, "label"), exist_ok=True)
        with open(os.path.join(layers, "label", "data.geojson"), "w") as f:
            json.dump({"type": "FeatureCollection", "properties": {},
                       "features": [{"type": "Feature", "properties": {"other": 1},
                                     "geometry": {"type": "Point", "coordinates": [b[0], b[1]]}},
                                    {"type": "Feature", "properties": {"category": label, "score": 0.5},
                                     "geometry": {"type": "Point", "coordinates": [b[0] + 3, b[1] + 3]}}]}, f)
        for layer in ("sentinel2", "dem", "rgb", "s1", "landcover", "canopy", "label"):
            open(os.path.join(layers, layer, "completed"), "w").close()
        # What the reader must produce for --layers "sentinel2:B02,B_08,B04 dem:elevation", read back with GDAL.
        s2_path = os.path.join(layers, "sentinel2", "B04_B03_B02", "geotiff.tif")
        img = np.concatenate([read_back(s2_path, [3]),
                              read_back(os.path.join(layers, "sentinel2", bandset_dirname(["B_08"]), "geotiff.tif"), [1]),
                              read_back(s2_path, [1]),
                              read_back(os.path.join(layers, "dem", "elevation", "geotiff.tif"), [1])])
        m = read_back(os.path.join(layers, "landcover", "class", "geotiff.tif"), [1])[0]
        raw_lc = gdal.Open(os.path.join(layers, "landcover", "class", "geotiff.tif")).ReadAsArray().astype(np.int32)
        raw_lc[raw_lc == 255] = -1
        images.append(img)
        masks.append(raw_lc)
        labels.append(label)
        names.append(name)
        groups.append(group)
        splits.append(split)
        origins[f"{group}/{name}"] = [b[0], b[1]]
    # A window whose sentinel2 layer is not completed: skipped and counted.
    d = write_window(root, "g1", "incomplete", (0, 0, 64, 64), "train")
    write_tif(os.path.join(d, "layers", "sentinel2", "B04_B03_B02", "geotiff.tif"),
              np.zeros((3, 64, 64), np.uint16), (0, 0, 64, 64), gdal.GDT_UInt16)
    classes = sorted(set(l for *_, l in WINDOWS))
    write_expected(args.expected, np.stack(images), names, groups, splits,
                   masks=np.stack(masks), labels=np.array([classes.index(l) for l in labels]))
    with open(args.origins, "w") as f:
        json.dump(origins, f)
    return 0


def write_expected(path, images, names, groups, splits, masks=None, labels=None):
    text = h5py.string_dtype("utf-8")
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images.astype(np.float32))
        f.create_dataset("names", data=names, dtype=text)
        f.create_dataset("groups", data=groups, dtype=text)
        f.create_dataset("splits", data=splits, dtype=text)
        if masks is not None:
            d = f.create_dataset("masks", data=masks)
            d.attrs["ignore_index"] = -1
        if labels is not None:
            f.create_dataset("labels", data=labels.astype(np.int64))


def landsat(args):
    """The scene's pixels on an rslearn window grid: same CRS and pixel size; the origin moves by
    less than a pixel so that pixel (x1, y1) is the window's corner, as rslearn writes rasters."""
    src = gdal.Open(args.tif)
    gt = src.GetGeoTransform()
    res = (gt[1], gt[5])
    x1, y1 = int(round(gt[0] / res[0])), int(round(gt[3] / res[1]))
    w, h = src.RasterXSize, src.RasterYSize
    bounds = (x1, y1, x1 + w, y1 + h)
    srs = osr.SpatialReference(wkt=src.GetProjection())
    srs.AutoIdentifyEPSG()
    crs = f"EPSG:{srs.GetAuthorityCode(None)}"
    root = args.root
    d = write_window(root, "landsat", "recife", bounds, "train", crs=crs, res=res)
    bands = [f"B{i}" for i in range(1, 7)]
    tif = os.path.join(d, "layers", "landsat", "_".join(bands), "geotiff.tif")
    os.makedirs(os.path.dirname(tif), exist_ok=True)
    gdal.Translate(tif, src, outputBounds=[x1 * res[0], y1 * res[1], (x1 + w) * res[0], (y1 + h) * res[1]])
    open(os.path.join(d, "layers", "landsat", "completed"), "w").close()
    img = read_back(tif, list(range(1, 7)))
    write_expected(args.expected, img[None], ["recife"], ["landsat"], ["train"])
    with open(args.origins, "w") as f:
        json.dump({"landsat/recife": [x1, y1]}, f)
    print(json.dumps({"crs": crs, "bounds": bounds, "resolution": res}))
    return 0


def labels(args):
    """Masks (raster label layer) or class ids (GeoJSON label layer) equal the expected ones."""
    s = int(args.crop_size)
    origins = json.load(open(args.origins))
    with h5py.File(args.expected) as e, h5py.File(args.cache) as c:
        index = {(g.decode(), n.decode()): i for i, (g, n) in enumerate(zip(e["groups"][:], e["names"][:]))}
        grp, win, bounds = c["index/group"].asstr()[:], c["index/window"].asstr()[:], c["index/bounds"][:]
        has_mask, has_class = "labels/mask" in c, "labels/class" in c
        if not (has_mask or has_class):
            print("the cache has no labels", file=sys.stderr)
            return 1
        for r in range(len(win)):
            i = index[(grp[r], win[r])]
            ox, oy = origins[f"{grp[r]}/{win[r]}"]
            x1, y1 = bounds[r][0] - ox, bounds[r][1] - oy
            if has_mask:
                want = np.full((s, s), -1, np.int32)
                part = e["masks"][i][y1:y1 + s, x1:x1 + s]
                want[:part.shape[0], :part.shape[1]] = part
                if not np.array_equal(c["labels/mask"][r], want):
                    print(f"row {r}: mask differs", file=sys.stderr)
                    return 1
            if has_class and int(c["labels/class"][r]) != int(e["labels"][i]):
                print(f"row {r}: class {c['labels/class'][r]} != {e['labels'][i]}", file=sys.stderr)
                return 1
        names = json.loads(c.attrs["signature"])["labels"].get("class_names")
    print(json.dumps({"rows": len(win), "masks": has_mask, "classes": has_class, "class_names": names}))
    return 0


def damage(args):
    w0 = os.path.join(args.root, "windows", "g1", "w0")
    if args.kind == "missing-bounds":
        meta = json.load(open(os.path.join(w0, "metadata.json")))
        del meta["bounds"]
        json.dump(meta, open(os.path.join(w0, "metadata.json"), "w"))
    elif args.kind == "unknown-crs":
        meta = json.load(open(os.path.join(w0, "metadata.json")))
        meta["projection"]["crs"] = "EPSG:99999999"
        json.dump(meta, open(os.path.join(w0, "metadata.json"), "w"))
    elif args.kind == "size-mismatch":
        tif = os.path.join(w0, "layers", "dem", "elevation", "geotiff.tif")
        write_tif(tif, np.zeros((1, 32, 64), np.float32), (100, -300, 164, -268), gdal.GDT_Float32)
    elif args.kind == "missing-band":
        tif = os.path.join(w0, "layers", "sentinel2", "B04_B03_B02", "geotiff.tif")
        write_tif(tif, np.zeros((2, 64, 64), np.uint16), (100, -300, 164, -236), gdal.GDT_UInt16)
    elif args.kind == "corrupt":
        tif = os.path.join(w0, "layers", "dem", "elevation", "geotiff.tif")
        data = open(tif, "rb").read()
        open(tif, "wb").write(data[: len(data) // 2])  # cut short: the pixel strips are gone
    elif args.kind == "smaller-window":
        # w0 becomes 48x40 (its rasters too); the other windows stay 64x64.
        meta = json.load(open(os.path.join(w0, "metadata.json")))
        x1, y1 = meta["bounds"][0], meta["bounds"][1]
        meta["bounds"] = [x1, y1, x1 + 48, y1 + 40]
        json.dump(meta, open(os.path.join(w0, "metadata.json"), "w"))
        for dirpath, _, files in os.walk(os.path.join(w0, "layers")):
            if "geotiff.tif" not in files:
                continue
            tif = os.path.join(dirpath, "geotiff.tif")
            ds = gdal.Open(tif)
            count, band = ds.RasterCount, ds.GetRasterBand(1)
            gdal_type, nodata = band.DataType, band.GetNoDataValue()
            dtype = band.ReadAsArray().dtype
            ds = None
            write_tif(tif, np.zeros((count, 40, 48), dtype), meta["bounds"], gdal_type, nodata=nodata)
    elif args.kind == "sqlite":
        shutil.rmtree(os.path.join(args.root, "windows"))
        open(os.path.join(args.root, "windows.sqlite3"), "wb").close()
    else:
        print(f"unknown kind {args.kind}", file=sys.stderr)
        return 2
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("synthetic")
    q.add_argument("root")
    q.add_argument("expected")
    q.add_argument("origins")
    q.set_defaults(fn=synthetic)
    q = sub.add_parser("landsat")
    q.add_argument("tif")
    q.add_argument("root")
    q.add_argument("expected")
    q.add_argument("origins")
    q.set_defaults(fn=landsat)
    q = sub.add_parser("labels")
    q.add_argument("cache")
    q.add_argument("expected")
    q.add_argument("origins")
    q.add_argument("--crop-size", required=True)
    q.set_defaults(fn=labels)
    q = sub.add_parser("break")
    q.add_argument("root")
    q.add_argument("kind")
    q.set_defaults(fn=damage)
    args = p.parse_args()
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
