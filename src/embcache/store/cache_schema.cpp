#include "embcache/store/cache_schema.hpp"

#include <set>

namespace embcache {

std::string LevelSpec::shape_text() const {
  std::string s = "[";
  for (std::size_t i = 0; i < row_shape.size(); ++i) s += (i ? ", " : "") + std::to_string(row_shape[i]);
  return s + "]";
}

std::size_t LevelSpec::row_bytes(StorageDtype dtype) const {
  std::size_t bytes = element_size(dtype);
  for (auto d : row_shape) bytes *= std::size_t(d);
  return bytes;
}

std::vector<std::int64_t> LevelSpec::pooled_time_shape() const {
  if (!temporal()) return row_shape;
  return std::vector<std::int64_t>(row_shape.begin() + 1, row_shape.end());
}

std::vector<std::int64_t> LevelSpec::scale_shape() const {
  const std::size_t feature_axes = is_map() ? 2 : 1;
  return std::vector<std::int64_t>(row_shape.begin(), row_shape.end() - std::ptrdiff_t(feature_axes));
}

std::int64_t row_feature_bytes(const std::vector<LevelSpec>& levels, StorageDtype dtype) {
  std::int64_t total = 0;
  for (const auto& level : levels) {
    total += std::int64_t(level.row_bytes(dtype));
    if (dtype == StorageDtype::kInt8) {
      std::int64_t scales = 1;
      for (auto d : level.scale_shape()) scales *= d;
      total += 4 * scales;
    }
  }
  return total;
}

std::int64_t format_version_needed(const std::vector<LevelSpec>& levels, StorageDtype dtype) {
  if (dtype == StorageDtype::kInt8) return 2;
  for (const auto& level : levels) {
    if (level.origin.needs_format_2()) return 2;
  }
  return 1;
}

bool is_informational_signature_field(const std::string& key) {
  // "levels" (resolved names) follows from levels_requested and the encoder, which are compared.
  return key == "embcache_version" || key == "encoder_path" || key == "dataset_path" || key == "levels" ||
         key == "computed_with";
}

std::vector<std::string> signature_differences(const Signature& existing, const Signature& wanted) {
  std::set<std::string> keys;
  for (auto it = existing.begin(); it != existing.end(); ++it) keys.insert(it.key());
  for (auto it = wanted.begin(); it != wanted.end(); ++it) keys.insert(it.key());
  std::vector<std::string> differing;
  for (const auto& key : keys) {
    if (is_informational_signature_field(key)) continue;
    const bool in_a = existing.contains(key), in_b = wanted.contains(key);
    if (in_a != in_b || (in_a && existing.at(key) != wanted.at(key))) differing.push_back(key);
  }
  return differing;
}

nlohmann::json label_kinds_to_json(const LabelKinds& kinds) {
  nlohmann::json j = nlohmann::json::object();
  if (kinds.has_class) j["class"] = true;
  if (kinds.has_value) j["value_width"] = kinds.value_width;
  if (kinds.has_mask) j["mask_ignore_index"] = kinds.ignore_index;
  if (kinds.has_pixel_value) j["pixel_value"] = true;
  if (!kinds.class_names.empty()) j["class_names"] = kinds.class_names;
  return j;
}

LabelKinds label_kinds_from_json(const nlohmann::json& j) {
  LabelKinds kinds;
  kinds.has_class = j.value("class", false);
  if (j.contains("value_width")) {
    kinds.has_value = true;
    kinds.value_width = j.at("value_width").get<std::int64_t>();
  }
  if (j.contains("mask_ignore_index")) {
    kinds.has_mask = true;
    kinds.ignore_index = j.at("mask_ignore_index").get<std::int64_t>();
  }
  kinds.has_pixel_value = j.value("pixel_value", false);
  if (j.contains("class_names")) kinds.class_names = j.at("class_names").get<std::vector<std::string>>();
  return kinds;
}

}  // namespace embcache
