// Cache format v1: dataset paths, the signature that decides whether a cache may be reused, and
// the per-level specs. docs/cache-format.md is the human-readable form of this file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "embcache/core/label_kinds.hpp"
#include "embcache/store/storage_options.hpp"

namespace embcache {

constexpr std::int64_t kCacheFormatVersion = 1;

namespace cache_paths {
constexpr const char* kGroup = "index/group";
constexpr const char* kWindow = "index/window";
constexpr const char* kSplit = "index/split";
constexpr const char* kBounds = "index/bounds";
constexpr const char* kPixelHash = "index/pixel_hash";
constexpr const char* kLevels = "levels";
constexpr const char* kLabelClass = "labels/class";
constexpr const char* kLabelValue = "labels/value";
constexpr const char* kLabelMask = "labels/mask";
constexpr const char* kLabelPixelValue = "labels/pixel_value";
}  // namespace cache_paths

// One stored encoder output.
struct LevelSpec {
  std::string name;                   // dataset name under /levels (dict key, or output index)
  std::int64_t index = 0;             // position in the encoder's output
  std::vector<std::int64_t> row_shape;  // [C, H, W] or [C]
  std::int64_t stride = 0;            // input pixels per feature pixel (0 for vector levels)
  std::string shape_text() const;
  std::size_t row_bytes(StorageDtype dtype) const;  // stored bytes of one row
};

// Stored feature bytes of one row across `levels`.
std::int64_t row_feature_bytes(const std::vector<LevelSpec>& levels, StorageDtype dtype);

// The signature is a JSON object stored as the root attribute "signature". Two caches may share
// rows only when every field except the informational ones is equal.
using Signature = nlohmann::json;

// Fields that describe but do not decide reuse.
bool is_informational_signature_field(const std::string& key);
// Names of the deciding fields whose values differ, in a stable order.
std::vector<std::string> signature_differences(const Signature& existing, const Signature& wanted);

nlohmann::json label_kinds_to_json(const LabelKinds& kinds);
LabelKinds label_kinds_from_json(const nlohmann::json& j);

}  // namespace embcache
