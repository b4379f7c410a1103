#include "embcache/dataset/rslearn_windows.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/core/sha256.hpp"

namespace embcache {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

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

// Builds one listing, step by step.
class Lister {
 public:
  explicit Lister(const RslearnOptions& options) : options_(options) {}

  RslearnListing list() {
    out_.root = fs::path(options_.root).lexically_normal().string();
    root_ = out_.root;
    if (fs::exists(root_ + "/windows.sqlite3") && !fs::is_directory(root_ + "/windows")) {
      throw InputError(root_ + ": this rslearn dataset keeps its windows in SQLite (windows.sqlite3), which embcache "
                       "does not read yet; use rslearn's file window storage (windows/GROUP/NAME/metadata.json)");
    }
    if (!fs::is_directory(root_ + "/windows")) {
      throw InputError(root_ + ": not an rslearn dataset (no windows/ directory)");
    }
    parse_layers();
    if (fs::is_regular_file(root_ + "/config.json")) config_ = read_json(root_ + "/config.json", "the dataset config");
    out_.from_config = !config_.is_null();
    list_windows();
    resolve_bands();
    if (!options_.label_layer.empty()) {
      out_.vector_labels = fs::exists(entries_.front().path + "/layers/" + options_.label_layer + "/data.geojson");
    }
    load_vector_labels();
    return std::move(out_);
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
      RslearnLayer l;
      l.dir = token.substr(0, colon);
      l.name = l.dir.substr(0, l.dir.find('.'));
      l.bands = split_list(token.substr(colon + 1), {"layers"});
      layers_.push_back(l);
    }
  }

  bool layer_completed(const std::string& window_path, const std::string& layer_dir) const {
    return fs::exists(window_path + "/layers/" + layer_dir + "/completed");
  }

  // The window directories --groups and --window-names select, in path order.
  std::vector<fs::path> window_dirs() const {
    std::set<std::string> groups, names;
    for (const auto& g : split_on(options_.groups, ",")) groups.insert(g);
    for (const auto& n : split_on(options_.window_names, ",")) names.insert(n);
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
    return dirs;
  }

  // One window's metadata.json, validated; `options` gets its "options" object.
  static RslearnWindow read_window(const fs::path& dir, Json& options) {
    const std::string meta_path = dir.string() + "/metadata.json";
    if (!fs::exists(meta_path)) throw InputError(meta_path + ": missing; every rslearn window needs its metadata.json");
    const Json meta = read_json(meta_path, "window metadata");
    auto field = [&](const char* key) -> const Json& {
      if (!meta.is_object() || !meta.contains(key) || meta[key].is_null()) {
        throw InputError(meta_path + ": field \"" + key + "\" is missing");
      }
      return meta[key];
    };
    RslearnWindow e;
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
    const Json& bounds = field("bounds");
    if (!bounds.is_array() || bounds.size() != 4 || !std::all_of(bounds.begin(), bounds.end(), [](const Json& b) { return b.is_number_integer(); })) {
      throw InputError(meta_path + ": field \"bounds\" must be 4 integers [x1, y1, x2, y2]");
    }
    e.info.bounds = {bounds[0].get<std::int64_t>(), bounds[1].get<std::int64_t>(), bounds[2].get<std::int64_t>(), bounds[3].get<std::int64_t>()};
    if (e.info.bounds.width() <= 0 || e.info.bounds.height() <= 0) {
      throw InputError(meta_path + ": bounds describe an empty window");
    }
    options = meta.value("options", Json::object());
    return e;
  }

  // --tags as key=value pairs.
  std::vector<std::pair<std::string, std::string>> tags() const {
    std::vector<std::pair<std::string, std::string>> tags;
    for (const auto& t : split_on(options_.tags, ",")) {
      const auto eq = t.find('=');
      if (eq == std::string::npos || eq == 0) throw UsageError(OptionName{"tags"}, "expected key=value, got \"" + t + "\"");
      tags.emplace_back(t.substr(0, eq), t.substr(eq + 1));
    }
    return tags;
  }

  static bool matches(const Json& options, const std::vector<std::pair<std::string, std::string>>& tags) {
    bool keep = true;
    for (const auto& [k, v] : tags) {
      if (!options.is_object() || !options.contains(k)) keep = false;
      else keep = keep && (options[k].is_string() ? options[k].get<std::string>() : options[k].dump()) == v;
    }
    return keep;
  }

  // Every requested layer (and the label layer) is marked completed in the window.
  bool completed(const RslearnWindow& e) const {
    bool complete = true;
    for (const auto& l : layers_) complete = complete && layer_completed(e.path, l.dir);
    if (!options_.label_layer.empty()) complete = complete && layer_completed(e.path, options_.label_layer);
    return complete;
  }

  void list_windows() {
    const auto wanted_tags = tags();
    const std::vector<fs::path> dirs = window_dirs();
    std::int64_t not_completed = 0, filtered = 0;
    for (const auto& dir : dirs) {
      Json options;
      RslearnWindow e = read_window(dir, options);
      if (!matches(options, wanted_tags)) {
        ++filtered;
        continue;
      }
      e.info.split = "train";
      if (options.is_object() && options.contains(options_.split_key)) {
        const Json& s = options[options_.split_key];
        e.info.split = s.is_string() ? s.get<std::string>() : s.dump();
      }
      if (!completed(e)) {
        ++not_completed;
        continue;
      }
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
  std::vector<std::vector<std::string>> band_sets(const RslearnLayer& l) const {
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
      const RslearnBand& first = sources_.back();
      const std::string sidecar = entries_.front().path + "/layers/" + first.layer_dir + "/" + first.bandset_dir + "/metadata.json";
      std::int64_t t = 1;
      if (fs::exists(sidecar)) {
        const Json m = read_json(sidecar, "raster metadata");
        if (m.contains("num_timesteps") && m["num_timesteps"].is_number_integer()) t = m["num_timesteps"].get<std::int64_t>();
      }
      timesteps_[l.dir] = t;
      channels_ += std::int64_t(l.bands.size()) * t;
    }
  }

  // Vector labels: the property of the first feature that has it, for every window, up front.
  void load_vector_labels() {
    if (!out_.vector_labels) return;
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
    LabelType type = options_.label_type;
    if (type == LabelType::kAuto) {
      type = (!options_.classes.empty() || values.front().is_string()) ? LabelType::kClass : LabelType::kValue;
    }
    if (type == LabelType::kValue) {
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

  const RslearnOptions& options_;
  RslearnListing out_;
  std::string root_;
  Json config_;
  std::vector<RslearnLayer>& layers_ = out_.layers;
  std::vector<RslearnWindow>& entries_ = out_.windows;
  std::vector<RslearnBand>& sources_ = out_.bands;
  std::map<std::string, std::int64_t>& timesteps_ = out_.timesteps;
  std::vector<std::pair<std::string, std::int64_t>>& skipped_ = out_.skipped;
  std::int64_t& channels_ = out_.channels;
  LabelKinds& labels_ = out_.vector_label_kinds;
  std::vector<std::int64_t>& class_labels_ = out_.class_labels;
  std::vector<float>& value_labels_ = out_.value_labels;
};

}  // namespace

std::string RslearnListing::raster_path(const RslearnWindow& w, const RslearnBand& b) const {
  return w.path + "/layers/" + b.layer_dir + "/" + b.bandset_dir + "/geotiff.tif";
}

RslearnListing list_rslearn_windows(const RslearnOptions& options) { return Lister(options).list(); }

const EnumTable<LabelType>& label_types() {
  static const EnumTable<LabelType> table{
      {LabelType::kAuto, "auto"}, {LabelType::kClass, "class"}, {LabelType::kValue, "value"}};
  return table;
}

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

}  // namespace embcache
