#include "embcache/dataset/rslearn_dataset.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "embcache/core/error.hpp"
#include "embcache/dataset/cropper.hpp"
#include "embcache/dataset/gdal_raster.hpp"
#include "embcache/dataset/read_ahead.hpp"

namespace embcache {
namespace {

namespace fs = std::filesystem;

class RslearnDataset : public WindowSource {
 public:
  explicit RslearnDataset(const RslearnOptions& options) : options_(options) {
    listing_ = list_rslearn_windows(options);  // JSON and folders only: option errors come first
    init_gdal();
    for (const auto& w : listing_.windows) {
      check_crs(w.crs, w.path + "/metadata.json");
      infos_.push_back(w.info);
    }
    choose_pixel_type();
    if (options_.time_axis) choose_time_axis();
    labels_ = listing_.vector_label_kinds;
    if (!options_.label_layer.empty() && !listing_.vector_labels) choose_raster_labels();
  }

  const std::vector<WindowInfo>& windows() const override { return infos_; }
  std::int64_t channels() const override { return time_steps_ > 0 ? listing_.channels / time_steps_ : listing_.channels; }
  std::int64_t time_steps() const override { return time_steps_; }
  LabelKinds label_kinds() const override { return labels_; }
  std::vector<std::pair<std::string, std::int64_t>> skipped() const override { return listing_.skipped; }
  bool concurrent_reads() const override { return true; }  // each read opens its own GDAL datasets

  std::string describe() const override {
    std::string layers;
    for (const auto& l : listing_.layers) {
      layers += (layers.empty() ? "" : " ") + l.dir + ":";
      for (std::size_t i = 0; i < l.bands.size(); ++i) layers += (i ? "," : "") + l.bands[i];
    }
    return listing_.root + " (rslearn, " + std::to_string(infos_.size()) + " windows, layers " + layers + ")";
  }

  nlohmann::json signature_fields() const override {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& l : listing_.layers) {
      layers.push_back({{"layer", l.dir}, {"bands", l.bands}, {"timesteps", listing_.timesteps.at(l.dir)}});
    }
    nlohmann::json j = {{"dataset_format", "rslearn"}, {"layers", layers}};
    if (!options_.label_layer.empty()) {
      j["label_layer"] = options_.label_layer;
      if (!options_.label_property.empty()) j["label_property"] = options_.label_property;
    }
    return j;
  }

  WindowData read(std::size_t index) override;

 private:
  // The bands' common type, float32 when they differ or when --pad-value needs it.
  void choose_pixel_type() {
    std::set<int> types;
    for (const auto& band : listing_.bands) {
      types.insert(int(raster_pixel_type(listing_.raster_path(listing_.windows.front(), band), "band " + band.band)));
    }
    pixel_type_ = types.size() == 1 ? at::ScalarType(*types.begin()) : at::kFloat;
    if (!dtype_holds(pixel_type_, options_.pad_value)) pixel_type_ = at::kFloat;  // nodata -> --pad-value
  }

  // A raster label layer: class ids per pixel (a mask), or numbers per pixel with --label-type
  // value (auto: float bands are values, integer bands are classes).
  void choose_raster_labels() {
    const LabelType type = options_.label_type;
    const bool float_band = raster_is_float(label_raster(listing_.windows.front()), "label GeoTIFF");
    if (type == LabelType::kValue || (type == LabelType::kAuto && float_band)) {
      labels_.has_pixel_value = true;
    } else {
      labels_.has_mask = true;
      labels_.ignore_index = -1;
    }
  }

  // The one-band GeoTIFF of a raster label layer.
  std::string label_raster(const RslearnWindow& e) const {
    const fs::path layer_dir = e.path + "/layers/" + options_.label_layer;
    if (fs::is_directory(layer_dir)) {
      for (const auto& sub : fs::directory_iterator(layer_dir)) {
        if (sub.is_directory() && fs::exists(sub.path() / "geotiff.tif")) return (sub.path() / "geotiff.tif").string();
      }
    }
    throw InputError(layer_dir.string() + ": the label layer has no band-set directory with a geotiff.tif (nor a data.geojson)");
  }

  void read_labels(std::size_t index, WindowData& data) const;
  // --time-axis: every layer read has the same number T > 1 of timesteps.
  void choose_time_axis() {
    std::string first;
    for (const auto& l : listing_.layers) {
      const std::int64_t t = listing_.timesteps.at(l.dir);
      if (first.empty()) {
        first = l.dir;
        time_steps_ = t;
      } else if (t != time_steps_) {
        throw UsageError(OptionName{"time-axis"}, "layer " + l.dir + " has " + std::to_string(t) + " timesteps and layer " +
                         first + " has " + std::to_string(time_steps_) + "; a time axis needs the same number in every "
                         "layer read (drop --time-axis to flatten them into channels)");
      }
    }
    if (time_steps_ <= 1) {
      throw UsageError(OptionName{"time-axis"}, listing_.root + " has no time axis: the layers read have one timestep "
                       "each; drop --time-axis");
    }
  }

  RslearnOptions options_;
  RslearnListing listing_;
  std::vector<WindowInfo> infos_;
  at::ScalarType pixel_type_ = at::kFloat;
  LabelKinds labels_;
  std::int64_t time_steps_ = 0;
};

WindowData RslearnDataset::read(std::size_t index) {
  const RslearnWindow& e = listing_.windows[index];
  const auto& sources = listing_.bands;
  WindowData data;
  const std::int64_t h = e.info.bounds.height(), w = e.info.bounds.width();
  data.pixels = at::empty({listing_.channels, h, w}, at::TensorOptions().dtype(pixel_type_));
  std::int64_t channel = 0;
  // Bands of one band-set file are read in one call.
  std::size_t i = 0;
  while (i < sources.size()) {
    std::size_t j = i;
    std::vector<int> numbers;
    const std::int64_t t = listing_.timesteps.at(sources[i].layer_dir);
    while (j < sources.size() && sources[j].layer_dir == sources[i].layer_dir && sources[j].bandset_dir == sources[i].bandset_dir) {
      for (std::int64_t k = 0; k < t; ++k) numbers.push_back(int(sources[j].index * t + k + 1));
      ++j;
    }
    const std::string path = listing_.raster_path(e, sources[i]);
    if (!fs::exists(path)) {
      throw InputError(path + ": missing, though layer " + sources[i].layer_dir + " is marked completed");
    }
    read_raster_bands(path, e, numbers, data.pixels.narrow(0, channel, std::int64_t(numbers.size())), options_.pad_value);
    channel += std::int64_t(numbers.size());
    i = j;
  }
  // rslearn orders channels band-major (c * T + t): [C * T, H, W] -> [T, C, H, W].
  if (time_steps_ > 0) data.pixels = data.pixels.view({-1, time_steps_, h, w}).transpose(0, 1).contiguous();
  read_labels(index, data);
  return data;
}

void RslearnDataset::read_labels(std::size_t index, WindowData& data) const {
  const RslearnWindow& e = listing_.windows[index];
  const std::int64_t h = e.info.bounds.height(), w = e.info.bounds.width();
  if (labels_.has_mask) {
    data.mask = at::empty({1, h, w}, at::kInt);
    read_raster_bands(label_raster(e), e, {1}, data.mask, double(labels_.ignore_index));
    data.mask = data.mask[0];
  }
  if (labels_.has_pixel_value) {
    data.pixel_value = at::empty({1, h, w}, at::kFloat);
    read_raster_bands(label_raster(e), e, {1}, data.pixel_value, std::nan(""));
    data.pixel_value = data.pixel_value[0];
  }
  if (labels_.has_class) data.label_class = listing_.class_labels[index];
  if (labels_.has_value) data.label_value = at::scalar_tensor(listing_.value_labels[index], at::kFloat);
}

}  // namespace

std::unique_ptr<WindowSource> open_rslearn_dataset(const RslearnOptions& options, const WindowFilter& filter) {
  std::unique_ptr<WindowSource> dataset = filter_windows(std::make_unique<RslearnDataset>(options), filter);
  if (options.reader_threads <= 0) return dataset;
  return std::make_unique<ReadAheadSource>(std::move(dataset), options.reader_threads);
}

}  // namespace embcache
