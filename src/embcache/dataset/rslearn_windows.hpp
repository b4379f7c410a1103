// The windows of an rslearn dataset, listed and validated from its JSON files and directories
// alone (no raster is opened, no GDAL): --layers and their band sets, the filters, splits,
// completed layers, timesteps and vector labels. rslearn_dataset reads the rasters it names.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "embcache/core/label_kinds.hpp"
#include "embcache/dataset/window_source.hpp"

#include "embcache/core/enum_table.hpp"

namespace embcache {

// --label-type: what labels are. auto: raster bands by their type (float: values, integer:
// classes); vector labels by their values (strings, or --classes given: classes; numbers: values).
enum class LabelType { kAuto, kClass, kValue };
const EnumTable<LabelType>& label_types();

struct RslearnOptions {
  std::string root;
  std::string layers;          // "sentinel2:B04,B03,B02" ; several separated by ';' or spaces
  std::string groups;          // comma list; empty = all
  std::string window_names;    // comma list; empty = all
  std::string tags;            // comma list of key=value matched against metadata options
  std::string split_key = "split";
  std::string label_layer;     // raster (mask) or vector (GeoJSON) layer; empty = no labels
  std::string label_property;  // vector label layers: the feature property
  LabelType label_type = LabelType::kAuto;
  std::string classes;         // vector class labels: names in id order; empty = sorted distinct values
  double pad_value = 0.0;      // replaces nodata pixels, like padding past a window's edge
  int reader_threads = 2;      // windows read ahead in parallel (0: read in the caller's thread)
  bool time_axis = false;      // pixels [T, C, H, W] instead of rslearn's flattened c*T + t channels
};

struct RslearnLayer {
  std::string dir;   // directory under layers/: "sentinel2" or "sentinel2.1" (item group 1)
  std::string name;  // the layer's name in config.json: "sentinel2"
  std::vector<std::string> bands;
};

// Where one requested band lives: its band-set directory and position in that set.
struct RslearnBand {
  std::string layer_dir;
  std::string bandset_dir;
  std::string band;
  int index = 0;
};

struct RslearnWindow {
  WindowInfo info;
  std::string path;  // the window directory
  std::string crs;
  double x_resolution = 0, y_resolution = 0;
};

struct RslearnListing {
  std::string root;
  std::vector<RslearnLayer> layers;
  std::vector<RslearnWindow> windows;  // the ones to read: matched, completed, in path order
  std::vector<RslearnBand> bands;      // every requested band, in channel order
  std::map<std::string, std::int64_t> timesteps;  // per layer dir (rslearn flattens bands as c*T + t)
  std::int64_t channels = 0;
  std::vector<std::pair<std::string, std::int64_t>> skipped;  // reason -> windows left out
  bool from_config = false;            // band sets came from config.json (else directory names)
  // Vector labels (a GeoJSON label layer), one per window; raster labels are the reader's.
  bool vector_labels = false;
  LabelKinds vector_label_kinds;
  std::vector<std::int64_t> class_labels;
  std::vector<float> value_labels;

  // The GeoTIFF of band `b` in window `w`.
  std::string raster_path(const RslearnWindow& w, const RslearnBand& b) const;
};

// InputError naming the file and field for a malformed dataset, UsageError naming the option.
RslearnListing list_rslearn_windows(const RslearnOptions& options);

// True when `path` looks like an rslearn dataset root (has windows/ or windows.sqlite3).
bool is_rslearn_root(const std::string& path);

// rslearn's directory name for a band set: the bands joined with '_', or a SHA-256 when a band
// name contains '_' (of the JSON list) or the joined name exceeds 64 characters (of that name).
std::string rslearn_bandset_dirname(const std::vector<std::string>& bands);

}  // namespace embcache
