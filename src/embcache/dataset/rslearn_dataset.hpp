// rslearn dataset directories (ROOT/windows/GROUP/NAME/...): windows from metadata.json, pixels
// from materialised GeoTIFF layers read with GDAL, labels from a raster or GeoJSON layer.
// docs/dataset-formats.md describes what is read and what is not supported.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "embcache/dataset/window_source.hpp"

namespace embcache {

struct RslearnOptions {
  std::string root;
  std::string layers;          // "sentinel2:B04,B03,B02" ; several separated by ';' or spaces
  std::string groups;          // comma list; empty = all
  std::string window_names;    // comma list; empty = all
  std::string tags;            // comma list of key=value matched against metadata options
  std::string split_key = "split";
  std::string label_layer;     // raster (mask) or vector (GeoJSON) layer; empty = no labels
  std::string label_property;  // vector label layers: the feature property
  std::string label_type = "auto";  // auto | class | value (vector labels)
  std::string classes;         // vector class labels: names in id order; empty = sorted distinct values
  double pad_value = 0.0;      // replaces nodata pixels, like padding past a window's edge
  int reader_threads = 2;      // windows read ahead in parallel (0: read in the caller's thread)
};

// True when `path` looks like an rslearn dataset root (has windows/ or windows.sqlite3).
bool is_rslearn_root(const std::string& path);

// Lists and validates the windows (InputError naming the file and field), resolves the band
// sets, and skips windows whose layers are not completed (see WindowSource::skipped).
std::unique_ptr<WindowSource> open_rslearn_dataset(const RslearnOptions& options);

// rslearn's directory name for a band set: the bands joined with '_', or a SHA-256 when a band
// name contains '_' (of the JSON list) or the joined name exceeds 64 characters (of that name).
std::string rslearn_bandset_dirname(const std::vector<std::string>& bands);

}  // namespace embcache
