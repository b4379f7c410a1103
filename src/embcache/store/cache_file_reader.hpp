// Reads one cache file (format 1 or 2): signature, level specs, index columns and row blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "embcache/store/cache_schema.hpp"
#include "embcache/h5/h5.hpp"
#include "embcache/store/row_batch.hpp"
#include "embcache/store/row_source.hpp"

namespace embcache {

// Why `path` cannot be opened as an embcache cache ("no such file", "not an HDF5 file, so not an
// embcache cache", ...), or "" when it is an HDF5 file marked with embcache_format. Callers add
// what to do, which depends on whether they read the cache or would write to it.
std::string not_a_cache_reason(const std::string& path);

class CacheFileReader : public RowSource {
 public:
  // Throws InputError when `path` is not an embcache cache (see not_a_cache_reason) or was
  // written by a newer format.
  explicit CacheFileReader(std::string path);

  const std::string& path() const { return path_; }
  const Signature& signature() const { return signature_; }
  const std::vector<LevelSpec>& levels() const { return levels_; }
  const LabelKinds& label_kinds() const { return labels_; }
  StorageOptions storage() const { return storage_; }
  std::int64_t rows() const override { return rows_; }
  std::string embcache_version() const { return version_; }
  // The root attribute `complete`: false when the run that wrote the file was interrupted, so
  // it lacks crops; nullopt for caches written before embcache recorded it.
  std::optional<bool> complete() const { return complete_; }
  // The root attribute `content_id`, which changes whenever the rows do; nullopt for caches
  // written before embcache recorded it.
  const std::optional<std::string>& content_id() const { return content_id_; }
  const h5::File& file() const { return file_; }

  CacheIndex read_index() const override;
  RowBatch read_rows(std::int64_t start, std::int64_t count) const override;
  std::int64_t row_feature_bytes() const override;
  // Rows [start, start + count) of one level, in the storage dtype: [count, ...row_shape].
  at::Tensor read_level(const LevelSpec& level, std::int64_t start, std::int64_t count) const;
  // int8 caches: rows [start, start + count) of a level's scales, float32 [count, ...scale_shape].
  at::Tensor read_scales(const LevelSpec& level, std::int64_t start, std::int64_t count) const;
  // Rows of /labels/mask as int32 [count, h, w]; mask_shape() is {h, w}, or {} without masks.
  at::Tensor read_masks(std::int64_t start, std::int64_t count) const;
  std::vector<std::int64_t> mask_shape() const;
  // Rows of /labels/pixel_value as float32 [count, h, w] (NaN: no value); shape {h, w} or {}.
  at::Tensor read_pixel_values(std::int64_t start, std::int64_t count) const;
  std::vector<std::int64_t> pixel_value_shape() const;
  // Rows per chunk shared by the levels (docs/cache-format.md): reads aligned to it touch whole chunks.
  std::int64_t chunk_rows() const;

 private:
  std::vector<std::int64_t> dense_shape(const char* name) const;
  void check_scales(const LevelSpec& level) const;  // InputError when /scales/<level> is missing or wrong
  at::Tensor read_dense(const char* name, h5::Type mem_type, at::ScalarType dtype, std::int64_t start, std::int64_t count) const;

  std::string path_;
  h5::File file_;
  Signature signature_;
  std::vector<LevelSpec> levels_;
  LabelKinds labels_;
  StorageOptions storage_;
  std::string version_;
  std::optional<bool> complete_;
  std::optional<std::string> content_id_;
  std::int64_t rows_ = 0;
};

}  // namespace embcache
