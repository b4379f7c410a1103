#include "embcache/dataset/rslearn_dataset.hpp"

#include <ATen/ATen.h>
#include <cpl_conv.h>
#include <cpl_error.h>
#include <gdal.h>
#include <ogr_srs_api.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/core/sha256.hpp"
#include "embcache/dataset/cropper.hpp"

namespace embcache {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct LayerRequest {
  std::string dir;     // directory under layers/: "sentinel2" or "sentinel2.1" (item group 1)
  std::string name;    // the layer's name in config.json: "sentinel2"
  std::vector<std::string> bands;
};

// Where one requested band lives: its band-set directory and position in that set.
struct BandSource {
  std::string layer_dir;
  std::string bandset_dir;
  std::string band;
  int index = 0;
};

struct WindowEntry {
  WindowInfo info;
  std::string path;      // the window directory
  std::string crs;
  double x_resolution = 0, y_resolution = 0;
};

std::vector<std::string> split_on(const std::string& text, const std::string& seps) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (seps.find(c) != std::string::npos) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

Json read_json(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot read " + what);
  try {
    return Json::parse(in);
  } catch (const Json::parse_error& e) {
    throw InputError(path + ": " + what + " is not valid JSON (" + first_line(e.what()) + ")");
  }
}

std::string gdal_message() {
  const std::string m = CPLGetLastErrorMsg();
  return m.empty() ? "GDAL could not read it" : first_line(m);
}

struct GdalDataset {
  GDALDatasetH handle = nullptr;
  explicit GdalDataset(const std::string& path) {
    CPLErrorReset();
    handle = GDALOpenEx(path.c_str(), GDAL_OF_RASTER | GDAL_OF_READONLY, nullptr, nullptr, nullptr);
  }
  ~GdalDataset() {
    if (handle) GDALClose(handle);
  }
  GdalDataset(const GdalDataset&) = delete;
  GdalDataset& operator=(const GdalDataset&) = delete;
};

struct SpatialRef {
  OGRSpatialReferenceH handle = OSRNewSpatialReference(nullptr);
  ~SpatialRef() { OSRDestroySpatialReference(handle); }
  SpatialRef() = default;
  SpatialRef(const SpatialRef&) = delete;
  SpatialRef& operator=(const SpatialRef&) = delete;
};

at::ScalarType torch_type_for(GDALDataType t) {
  switch (t) {
    case GDT_Byte: return at::kByte;
    case GDT_Int16: return at::kShort;
    case GDT_UInt16:
    case GDT_Int32: return at::kInt;  // uint16 widened to int32, as for array datasets
    default: return at::kFloat;
  }
}

GDALDataType gdal_type_for(at::ScalarType t) {
  switch (t) {
    case at::kByte: return GDT_Byte;
    case at::kShort: return GDT_Int16;
    case at::kInt: return GDT_Int32;
    default: return GDT_Float32;
  }
}

std::string json_list_text(const std::vector<std::string>& bands) {
  // Python's json.dumps(list_of_str) with its default separators.
  std::string s = "[";
  for (std::size_t i = 0; i < bands.size(); ++i) {
    s += i ? ", \"" : "\"";
    for (char c : bands[i]) {
      if (c == '"' || c == '\\') s += '\\';
      s += c;
    }
    s += "\"";
  }
  return s + "]";
}

class RslearnDataset : public WindowSource {
 public:
  explicit RslearnDataset(const RslearnOptions& options) : options_(options) {
    GDALAllRegister();
    // Bound GDAL's block cache: windows are read once, so a large cache only costs memory.
    GDALSetCacheMax64(std::int64_t(256) << 20);
    CPLSetErrorHandler(CPLQuietErrorHandler);
    root_ = fs::path(options.root).lexically_normal().string();
    if (fs::exists(root_ + "/windows.sqlite3") && !fs::is_directory(root_ + "/windows")) {
      throw InputError(root_ + ": this rslearn dataset keeps its windows in SQLite (windows.sqlite3), which embcache "
                       "does not read yet; use rslearn's file window storage (windows/GROUP/NAME/metadata.json)");
    }
    if (!fs::is_directory(root_ + "/windows")) {
      throw InputError(root_ + ": not an rslearn dataset (no windows/ directory)");
    }
    parse_layers();
    if (fs::is_regular_file(root_ + "/config.json")) config_ = read_json(root_ + "/config.json", "the dataset config");
    list_windows();
    resolve_bands();
    load_vector_labels();
  }

  ~RslearnDataset() override {
    for (auto& [i, f] : ahead_) {
      if (f.valid()) f.wait();
    }
  }

  const std::vector<WindowInfo>& windows() const override { return infos_; }
  std::int64_t channels() const override { return channels_; }
  LabelKinds label_kinds() const override { return labels_; }
  std::vector<std::pair<std::string, std::int64_t>> skipped() const override { return skipped_; }

  std::string describe() const override {
    std::string layers;
    for (const auto& l : layers_) {
      layers += (layers.empty() ? "" : " ") + l.dir + ":";
      for (std::size_t i = 0; i < l.bands.size(); ++i) layers += (i ? "," : "") + l.bands[i];
    }
    return root_ + " (rslearn, " + std::to_string(infos_.size()) + " windows, layers " + layers + ")";
  }

  Json signature_fields() const override {
    Json layers = Json::array();
    for (const auto& l : layers_) layers.push_back({{"layer", l.dir}, {"bands", l.bands}, {"timesteps", timesteps_.at(l.dir)}});
    Json j = {{"dataset_format", "rslearn"}, {"layers", layers}};
    if (!options_.label_layer.empty()) {
      j["label_layer"] = options_.label_layer;
      if (!options_.label_property.empty()) j["label_property"] = options_.label_property;
    }
    return j;
  }

  WindowData read(std::size_t index) override {
    if (options_.reader_threads <= 0) return read_now(index);
    // Keep up to 2 x reader_threads windows in flight, in the order the pipeline asks for them.
    const std::size_t depth = std::size_t(std::max(1, options_.reader_threads)) * 2;
    for (std::size_t i = index; i < std::min(infos_.size(), index + depth); ++i) {
      if (!ahead_.count(i)) ahead_[i] = std::async(std::launch::async, [this, i] { return read_now(i); });
    }
    auto it = ahead_.find(index);
    WindowData data = it->second.get();
    ahead_.erase(it);
    for (auto j = ahead_.begin(); j != ahead_.end();) {  // a caller that skipped ahead: drop stale reads
      if (j->first < index) {
        j->second.wait();
        j = ahead_.erase(j);
      } else {
        ++j;
      }
    }
    return data;
  }

 private:
  void parse_layers() {
    if (options_.layers.empty()) {
      throw UsageError(OptionName{"layers"}, "required for rslearn datasets, e.g. --layers sentinel2:B04,B03,B02");
    }
    for (const auto& token : split_on(options_.layers, "; \t")) {
      const auto colon = token.find(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == token.size()) {
        throw UsageError(OptionName{"layers"}, "expected LAYER:BAND,BAND,... for each layer, got \"" + token + "\"");
      }
      LayerRequest l;
      l.dir = token.substr(0, colon);
      l.name = l.dir.substr(0, l.dir.find('.'));
      l.bands = split_list(token.substr(colon + 1), {"layers"});
      layers_.push_back(l);
    }
  }

  bool layer_completed(const std::string& window_path, const std::string& layer_dir) const {
    return fs::exists(window_path + "/layers/" + layer_dir + "/completed");
  }

  void list_windows() {
    std::set<std::string> groups, names;
    for (const auto& g : split_on(options_.groups, ",")) groups.insert(g);
    for (const auto& n : split_on(options_.window_names, ",")) names.insert(n);
    std::vector<std::pair<std::string, std::string>> tags;
    for (const auto& t : split_on(options_.tags, ",")) {
      const auto eq = t.find('=');
      if (eq == std::string::npos || eq == 0) throw UsageError(OptionName{"tags"}, "expected key=value, got \"" + t + "\"");
      tags.emplace_back(t.substr(0, eq), t.substr(eq + 1));
    }
    std::vector<fs::path> dirs;
    for (const auto& group_dir : fs::directory_iterator(root_ + "/windows")) {
      if (!group_dir.is_directory()) continue;
      if (!groups.empty() && !groups.count(group_dir.path().filename().string())) continue;
      for (const auto& window_dir : fs::directory_iterator(group_dir.path())) {
        if (!window_dir.is_directory()) continue;
        if (!names.empty() && !names.count(window_dir.path().filename().string())) continue;
        dirs.push_back(window_dir.path());
      }
    }
    std::sort(dirs.begin(), dirs.end());
    std::int64_t not_completed = 0, filtered = 0;
    for (const auto& dir : dirs) {
      const std::string meta_path = dir.string() + "/metadata.json";
      if (!fs::exists(meta_path)) throw InputError(meta_path + ": missing; every rslearn window needs its metadata.json");
      const Json meta = read_json(meta_path, "window metadata");
      auto field = [&](const char* key) -> const Json& {
        if (!meta.is_object() || !meta.contains(key) || meta[key].is_null()) {
          throw InputError(meta_path + ": field \"" + key + "\" is missing");
        }
        return meta[key];
      };
      WindowEntry e;
      e.path = dir.string();
      const Json& group = field("group");
      const Json& name = field("name");
      if (!group.is_string() || !name.is_string()) throw InputError(meta_path + ": \"group\" and \"name\" must be strings");
      e.info.group = group.get<std::string>();
      e.info.name = name.get<std::string>();
      const Json& projection = field("projection");
      if (!projection.is_object() || !projection.contains("crs") || !projection["crs"].is_string() ||
          !projection.contains("x_resolution") || !projection["x_resolution"].is_number() ||
          !projection.contains("y_resolution") || !projection["y_resolution"].is_number()) {
        throw InputError(meta_path + ": field \"projection\" needs \"crs\" (a string), \"x_resolution\" and \"y_resolution\" (numbers)");
      }
      e.crs = projection["crs"].get<std::string>();
      e.x_resolution = projection["x_resolution"].get<double>();
      e.y_resolution = projection["y_resolution"].get<double>();
      if (e.x_resolution == 0 || e.y_resolution == 0) throw InputError(meta_path + ": projection resolutions must not be 0");
      {
        SpatialRef srs;
        if (OSRSetFromUserInput(srs.handle, e.crs.c_str()) != OGRERR_NONE) {
          throw InputError(meta_path + ": projection.crs \"" + e.crs + "\" is not a CRS GDAL knows (expected e.g. EPSG:32610)");
        }
      }
      const Json& bounds = field("bounds");
      if (!bounds.is_array() || bounds.size() != 4 || !std::all_of(bounds.begin(), bounds.end(), [](const Json& b) { return b.is_number_integer(); })) {
        throw InputError(meta_path + ": field \"bounds\" must be 4 integers [x1, y1, x2, y2]");
      }
      e.info.bounds = {bounds[0].get<std::int64_t>(), bounds[1].get<std::int64_t>(), bounds[2].get<std::int64_t>(), bounds[3].get<std::int64_t>()};
      if (e.info.bounds.width() <= 0 || e.info.bounds.height() <= 0) {
        throw InputError(meta_path + ": bounds describe an empty window");
      }
      const Json options = meta.value("options", Json::object());
      bool keep = true;
      for (const auto& [k, v] : tags) {
        if (!options.is_object() || !options.contains(k)) keep = false;
        else keep = keep && (options[k].is_string() ? options[k].get<std::string>() : options[k].dump()) == v;
      }
      if (!keep) {
        ++filtered;
        continue;
      }
      e.info.split = "train";
      if (options.is_object() && options.contains(options_.split_key)) {
        const Json& s = options[options_.split_key];
        e.info.split = s.is_string() ? s.get<std::string>() : s.dump();
      }
      bool complete = true;
      for (const auto& l : layers_) complete = complete && layer_completed(e.path, l.dir);
      if (!options_.label_layer.empty()) complete = complete && layer_completed(e.path, options_.label_layer);
      if (!complete) {
        ++not_completed;
        continue;
      }
      infos_.push_back(e.info);
      entries_.push_back(e);
    }
    if (not_completed) skipped_.emplace_back("a needed layer is not completed", not_completed);
    if (filtered) skipped_.emplace_back("filtered out by --tags", filtered);
    if (entries_.empty()) {
      throw InputError(root_ + ": no window to read (" + std::to_string(dirs.size()) + " windows matched --groups/--window-names, " +
                       std::to_string(not_completed) + " had a layer that is not completed, " + std::to_string(filtered) +
                       " were filtered out by --tags)");
    }
  }

  // Band sets from config.json (layers.NAME.band_sets[].bands), else from directory names.
  std::vector<std::vector<std::string>> band_sets(const LayerRequest& l) const {
    std::vector<std::vector<std::string>> sets;
    if (config_.is_object() && config_.contains("layers") && config_["layers"].contains(l.name)) {
      const Json& layer = config_["layers"][l.name];
      if (layer.contains("band_sets") && layer["band_sets"].is_array()) {
        for (const auto& bs : layer["band_sets"]) {
          if (bs.contains("bands") && bs["bands"].is_array()) sets.push_back(bs["bands"].get<std::vector<std::string>>());
        }
      }
    }
    if (sets.empty()) {
      // No config: band-set directories named by their bands (hashed names cannot be read back).
      std::set<std::string> seen;
      for (const auto& e : entries_) {
        const fs::path dir = e.path + "/layers/" + l.dir;
        if (!fs::is_directory(dir)) continue;
        for (const auto& sub : fs::directory_iterator(dir)) {
          if (sub.is_directory() && seen.insert(sub.path().filename().string()).second) {
            sets.push_back(split_on(sub.path().filename().string(), "_"));
          }
        }
        break;
      }
    }
    return sets;
  }

  void resolve_bands() {
    channels_ = 0;
    for (const auto& l : layers_) {
      const auto sets = band_sets(l);
      for (const auto& band : l.bands) {
        bool found = false;
        for (const auto& set : sets) {
          const auto it = std::find(set.begin(), set.end(), band);
          if (it == set.end()) continue;
          sources_.push_back({l.dir, rslearn_bandset_dirname(set), band, int(it - set.begin())});
          found = true;
          break;
        }
        if (!found) {
          std::string known;
          for (const auto& set : sets) {
            for (const auto& b : set) known += (known.empty() ? "" : ",") + b;
          }
          throw InputError(root_ + ": layer " + l.dir + " has no band " + band + " (its band sets" +
                           (config_.is_null() ? ", from directory names," : " in config.json") + " hold: " +
                           (known.empty() ? "nothing" : known) + ")");
        }
      }
      // Timesteps per layer from the first window's sidecar (rslearn flattens bands as c*T + t).
      const BandSource& first = sources_.back();
      const std::string sidecar = entries_.front().path + "/layers/" + first.layer_dir + "/" + first.bandset_dir + "/metadata.json";
      std::int64_t t = 1;
      if (fs::exists(sidecar)) {
        const Json m = read_json(sidecar, "raster metadata");
        if (m.contains("num_timesteps") && m["num_timesteps"].is_number_integer()) t = m["num_timesteps"].get<std::int64_t>();
      }
      timesteps_[l.dir] = t;
      channels_ += std::int64_t(l.bands.size()) * t;
    }
    // The pixel type: the bands' common GDAL type, float32 when they differ.
    std::set<int> types;
    for (const auto& s : sources_) {
      const std::string path = entries_.front().path + "/layers/" + s.layer_dir + "/" + s.bandset_dir + "/geotiff.tif";
      GdalDataset ds(path);
      if (!ds.handle) {
        throw InputError(path + ": cannot open the GeoTIFF of band " + s.band + " (" + gdal_message() + ")");
      }
      types.insert(int(GDALGetRasterDataType(GDALGetRasterBand(ds.handle, 1))));
    }
    pixel_type_ = types.size() == 1 ? torch_type_for(GDALDataType(*types.begin())) : at::kFloat;
    if (!dtype_holds(pixel_type_, options_.pad_value)) pixel_type_ = at::kFloat;  // nodata -> --pad-value

    if (!options_.label_layer.empty()) {
      const std::string vector_path = entries_.front().path + "/layers/" + options_.label_layer + "/data.geojson";
      vector_labels_ = fs::exists(vector_path);
      if (!vector_labels_) {
        // A raster label layer: class ids per pixel (a mask), or numbers per pixel with
        // --label-type value (auto: float bands are values, integer bands are classes).
        const std::string type = options_.label_type;
        if (type != "auto" && type != "class" && type != "value") {
          throw UsageError(OptionName{"label-type"}, "expected auto, class or value, got \"" + type + "\"");
        }
        bool float_band = false;
        const std::string tif = label_raster(entries_.front());
        GdalDataset ds(tif);
        if (!ds.handle) throw InputError(tif + ": cannot open the label GeoTIFF (" + gdal_message() + ")");
        const GDALDataType t = GDALGetRasterDataType(GDALGetRasterBand(ds.handle, 1));
        float_band = t == GDT_Float32 || t == GDT_Float64;
        if (type == "value" || (type == "auto" && float_band)) {
          labels_.has_pixel_value = true;
        } else {
          labels_.has_mask = true;
          labels_.ignore_index = -1;
        }
      }
    }
  }

  // Vector labels: the property of the first feature that has it, for every window, up front.
  void load_vector_labels() {
    if (!vector_labels_) return;
    if (options_.label_property.empty()) {
      throw UsageError(OptionName{"label-property"}, "required with the vector label layer " + options_.label_layer +
                       " (the GeoJSON feature property that holds the label)");
    }
    std::vector<Json> values;
    for (const auto& e : entries_) {
      const std::string path = e.path + "/layers/" + options_.label_layer + "/data.geojson";
      const Json doc = read_json(path, "GeoJSON label layer");
      Json value;
      if (doc.contains("features") && doc["features"].is_array()) {
        for (const auto& f : doc["features"]) {
          if (f.contains("properties") && f["properties"].is_object() && f["properties"].contains(options_.label_property)) {
            value = f["properties"][options_.label_property];
            break;
          }
        }
      }
      if (value.is_null()) {
        throw InputError(path + ": no feature has the property \"" + options_.label_property + "\"");
      }
      values.push_back(value);
    }
    std::string type = options_.label_type;
    if (type != "auto" && type != "class" && type != "value") {
      throw UsageError(OptionName{"label-type"}, "expected auto, class or value, got \"" + type + "\"");
    }
    if (type == "auto") type = (!options_.classes.empty() || values.front().is_string()) ? "class" : "value";
    if (type == "value") {
      labels_.has_value = true;
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (!values[i].is_number()) {
          throw InputError(entries_[i].path + "/layers/" + options_.label_layer + "/data.geojson: property \"" +
                           options_.label_property + "\" is " + values[i].dump() + ", not a number (--label-type value)");
        }
        value_labels_.push_back(values[i].get<float>());
      }
      return;
    }
    labels_.has_class = true;
    auto text = [](const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    if (!options_.classes.empty()) {
      labels_.class_names = split_list(options_.classes, {"classes"});
    } else {
      std::set<std::string> distinct;
      for (const auto& v : values) distinct.insert(text(v));
      labels_.class_names.assign(distinct.begin(), distinct.end());
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto it = std::find(labels_.class_names.begin(), labels_.class_names.end(), text(values[i]));
      if (it == labels_.class_names.end()) {
        throw InputError(entries_[i].path + "/layers/" + options_.label_layer + "/data.geojson: class \"" + text(values[i]) +
                         "\" is not in --classes " + options_.classes);
      }
      class_labels_.push_back(std::int64_t(it - labels_.class_names.begin()));
    }
  }

  // The one-band GeoTIFF of a raster label layer.
  std::string label_raster(const WindowEntry& e) const {
    const fs::path layer_dir = e.path + "/layers/" + options_.label_layer;
    if (fs::is_directory(layer_dir)) {
      for (const auto& sub : fs::directory_iterator(layer_dir)) {
        if (sub.is_directory() && fs::exists(sub.path() / "geotiff.tif")) return (sub.path() / "geotiff.tif").string();
      }
    }
    throw InputError(layer_dir.string() + ": the label layer has no band-set directory with a geotiff.tif (nor a data.geojson)");
  }

  // Opens a window's GeoTIFF and checks it lies on the window's pixel grid, exactly.
  void check_georeference(GDALDatasetH ds, const WindowEntry& e, const std::string& path) const {
    double gt[6];
    if (GDALGetGeoTransform(ds, gt) != CE_None) {
      throw InputError(path + ": has no georeference (corrupt, or not written by rslearn); rslearn GeoTIFFs place pixel "
                             "(x1, y1) of the window at their top-left");
    }
    const double tol = 1e-6 * std::max(std::abs(e.x_resolution), std::abs(e.y_resolution));
    if (std::abs(gt[1] - e.x_resolution) > tol || std::abs(gt[5] - e.y_resolution) > tol || gt[2] != 0 || gt[4] != 0) {
      throw InputError(path + ": pixel size (" + std::to_string(gt[1]) + ", " + std::to_string(gt[5]) +
                       ") differs from the window's resolution (" + std::to_string(e.x_resolution) + ", " +
                       std::to_string(e.y_resolution) + "); embcache does not resample");
    }
    const double x0 = gt[0] / gt[1], y0 = gt[3] / gt[5];
    const std::int64_t w = GDALGetRasterXSize(ds), h = GDALGetRasterYSize(ds);
    const Bounds have{std::llround(x0), std::llround(y0), std::llround(x0) + w, std::llround(y0) + h};
    if (std::abs(x0 - double(have.x1)) > 1e-3 || std::abs(y0 - double(have.y1)) > 1e-3 || !(have == e.info.bounds)) {
      std::ostringstream msg;
      msg << path << ": covers pixels [" << x0 << ", " << y0 << ", " << x0 + double(w) << ", " << y0 + double(h)
          << "] but the window's bounds are [" << e.info.bounds.x1 << ", " << e.info.bounds.y1 << ", " << e.info.bounds.x2
          << ", " << e.info.bounds.y2 << "]; embcache reads rasters materialised for their window";
      throw InputError(msg.str());
    }
    const char* wkt = GDALGetProjectionRef(ds);
    if (wkt && *wkt) {
      SpatialRef have_srs, want_srs;
      if (OSRImportFromWkt(have_srs.handle, const_cast<char**>(&wkt)) == OGRERR_NONE &&
          OSRSetFromUserInput(want_srs.handle, e.crs.c_str()) == OGRERR_NONE && !OSRIsSame(have_srs.handle, want_srs.handle)) {
        throw InputError(path + ": its CRS is not the window's " + e.crs + "; embcache does not reproject");
      }
    }
  }

  // Reads bands (1-based numbers) of one GeoTIFF into `out` [n, H, W] of `type`; nodata -> fill.
  void read_bands(const std::string& path, const WindowEntry& e, const std::vector<int>& bands, at::Tensor out, double fill) const {
    GdalDataset ds(path);
    if (!ds.handle) throw InputError(path + ": cannot open the GeoTIFF (" + gdal_message() + ")");
    check_georeference(ds.handle, e, path);
    const int count = GDALGetRasterCount(ds.handle);
    for (int b : bands) {
      if (b > count) {
        throw InputError(path + ": needs band " + std::to_string(b) + " but the GeoTIFF has " + std::to_string(count) +
                         " (the band set or the timestep count does not match the file)");
      }
    }
    const int w = int(e.info.bounds.width()), h = int(e.info.bounds.height());
    std::vector<int> band_list(bands.begin(), bands.end());
    const auto type = gdal_type_for(out.scalar_type());
    CPLErrorReset();
    if (GDALDatasetRasterIO(ds.handle, GF_Read, 0, 0, w, h, out.data_ptr(), w, h, type, int(band_list.size()),
                            band_list.data(), 0, 0, 0) != CE_None) {
      throw InputError(path + ": cannot read its pixels (" + gdal_message() + "); the file may be corrupt");
    }
    for (std::size_t i = 0; i < band_list.size(); ++i) {
      int has = 0;
      const double nodata = GDALGetRasterNoDataValue(GDALGetRasterBand(ds.handle, band_list[i]), &has);
      if (!has) continue;
      at::Tensor plane = out[std::int64_t(i)];
      if (std::isnan(nodata)) {
        plane.masked_fill_(at::isnan(plane), fill);
      } else {
        plane.masked_fill_(plane == at::scalar_tensor(nodata, plane.options()), fill);
      }
    }
  }

  WindowData read_now(std::size_t index) const {
    const WindowEntry& e = entries_[index];
    WindowData data;
    const std::int64_t h = e.info.bounds.height(), w = e.info.bounds.width();
    data.pixels = at::empty({channels_, h, w}, at::TensorOptions().dtype(pixel_type_));
    std::int64_t channel = 0;
    // Bands of one band-set file are read in one call.
    std::size_t i = 0;
    while (i < sources_.size()) {
      std::size_t j = i;
      std::vector<int> numbers;
      const std::int64_t t = timesteps_.at(sources_[i].layer_dir);
      while (j < sources_.size() && sources_[j].layer_dir == sources_[i].layer_dir && sources_[j].bandset_dir == sources_[i].bandset_dir) {
        for (std::int64_t k = 0; k < t; ++k) numbers.push_back(int(sources_[j].index * t + k + 1));
        ++j;
      }
      const std::string path = e.path + "/layers/" + sources_[i].layer_dir + "/" + sources_[i].bandset_dir + "/geotiff.tif";
      if (!fs::exists(path)) {
        throw InputError(path + ": missing, though layer " + sources_[i].layer_dir + " is marked completed");
      }
      read_bands(path, e, numbers, data.pixels.narrow(0, channel, std::int64_t(numbers.size())), options_.pad_value);
      channel += std::int64_t(numbers.size());
      i = j;
    }
    if (labels_.has_mask) {
      data.mask = at::empty({1, h, w}, at::kInt);
      read_bands(label_raster(e), e, {1}, data.mask, double(labels_.ignore_index));
      data.mask = data.mask[0];
    }
    if (labels_.has_pixel_value) {
      data.pixel_value = at::empty({1, h, w}, at::kFloat);
      read_bands(label_raster(e), e, {1}, data.pixel_value, std::nan(""));
      data.pixel_value = data.pixel_value[0];
    }
    if (labels_.has_class) data.label_class = class_labels_[index];
    if (labels_.has_value) data.label_value = at::scalar_tensor(value_labels_[index], at::kFloat);
    return data;
  }

  RslearnOptions options_;
  std::string root_;
  Json config_;
  std::vector<LayerRequest> layers_;
  std::vector<WindowEntry> entries_;
  std::vector<WindowInfo> infos_;
  std::vector<BandSource> sources_;
  std::map<std::string, std::int64_t> timesteps_;
  std::vector<std::pair<std::string, std::int64_t>> skipped_;
  std::int64_t channels_ = 0;
  at::ScalarType pixel_type_ = at::kFloat;
  LabelKinds labels_;
  bool vector_labels_ = false;
  std::vector<std::int64_t> class_labels_;
  std::vector<float> value_labels_;
  std::map<std::size_t, std::future<WindowData>> ahead_;
};

}  // namespace

std::string rslearn_bandset_dirname(const std::vector<std::string>& bands) {
  const bool underscore = std::any_of(bands.begin(), bands.end(), [](const std::string& b) { return b.find('_') != std::string::npos; });
  if (underscore) return sha256_hex(json_list_text(bands));
  std::string joined;
  for (std::size_t i = 0; i < bands.size(); ++i) joined += (i ? "_" : "") + bands[i];
  return joined.size() > 64 ? sha256_hex(joined) : joined;
}

bool is_rslearn_root(const std::string& path) {
  return fs::is_directory(path) && (fs::is_directory(fs::path(path) / "windows") || fs::exists(fs::path(path) / "windows.sqlite3"));
}

std::unique_ptr<WindowSource> open_rslearn_dataset(const RslearnOptions& options) {
  return std::make_unique<RslearnDataset>(options);
}

}  // namespace embcache
