// The cache format (versions 1 to 3): dataset paths, the signature that decides whether a cache
// may be reused, and the per-level specs. docs/cache-format.md is the human-readable form of this file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "embcache/core/label_kinds.hpp"
#include "embcache/core/level_origin.hpp"
#include "embcache/store/storage_options.hpp"

namespace embcache {

// The newest format this build reads and writes. A file is marked with the lowest version that
// describes it (format_version_needed), so builds that read only format 1 keep reading caches
// that use nothing newer. Format 3 is a view over parts (cache_parts.hpp); each part file, and
// every cache of one file, is format 1 or 2.
constexpr std::int64_t kCacheFormatVersion = 3;
// The signature's `format` field: what a row made with given options means. It rises only when
// the same options would store different values, so that caches stay extendable across formats.
constexpr std::int64_t kSignatureFormat = 1;

namespace cache_paths {
constexpr const char* kGroup = "index/group";
constexpr const char* kWindow = "index/window";
constexpr const char* kSplit = "index/split";
constexpr const char* kBounds = "index/bounds";
constexpr const char* kPixelHash = "index/pixel_hash";
constexpr const char* kLevels = "levels";
constexpr const char* kScales = "scales";  // format 2: int8 levels' scales, /scales/<level>
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
  LevelOrigin origin;                 // what it came from (for format 1 files: map or vector)
  bool is_map() const { return row_shape.size() == (origin.time_steps > 0 ? 4u : 3u); }
  bool temporal() const { return origin.time_steps > 0; }
  // The row shape once any time axis is pooled away: [C, H, W] or [C].
  std::vector<std::int64_t> pooled_time_shape() const;
  // int8 storage: the shape of one row's scales (one per channel of a map, one per row of a
  // vector; per time step too): the row shape without its spatial axes, or without C for vectors.
  std::vector<std::int64_t> scale_shape() const;
  std::string shape_text() const;
  std::size_t row_bytes(StorageDtype dtype) const;  // stored bytes of one row
};

// Stored feature bytes of one row across `levels` (int8: the scales included).
std::int64_t row_feature_bytes(const std::vector<LevelSpec>& levels, StorageDtype dtype);
// The lowest format version that describes a file of these levels and dtype.
std::int64_t format_version_needed(const std::vector<LevelSpec>& levels, StorageDtype dtype);

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
