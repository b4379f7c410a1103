#include "embcache/store/cache_file_reader.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>

#include "embcache/core/error.hpp"
#include "embcache/store/fletcher32.hpp"

namespace embcache {

namespace fs = std::filesystem;

namespace {

constexpr const char* kNoFormat = "an HDF5 file without the embcache_format attribute, so not an embcache cache";
constexpr const char* kReadAdvice = "; pass a cache written by 'embcache precompute'";

// not_a_cache_reason up to opening the file.
std::string not_an_hdf5_file_reason(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "no such file";
  if (fs::is_directory(path, ec)) return "a directory, not an embcache cache file";
  if (!h5::is_hdf5(path)) return "not an HDF5 file, so not an embcache cache";
  return "";
}

// The level attributes of format 2; a format 1 level is a map or a vector by its rank.
LevelOrigin read_origin(const h5::Dataset& ds, const LevelSpec& spec, const std::string& where) {
  LevelOrigin origin;
  origin.output = h5::read_attr_string(ds, "source_output").value_or(spec.name);
  origin.time_steps = h5::read_attr_int(ds, "time_steps").value_or(0);
  origin.source = default_level_source(spec.row_shape.size(), origin.time_steps);
  if (const auto source = h5::read_attr_string(ds, "source")) {
    try {
      origin.source = parse_level_source(*source);
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
  }
  origin.patch_size = h5::read_attr_int(ds, "patch_size").value_or(0);
  origin.prefix_tokens = h5::read_attr_int(ds, "prefix_tokens").value_or(0);
  origin.token = h5::read_attr_int(ds, "token").value_or(-1);
  return origin;
}

}  // namespace

std::string not_a_cache_reason(const std::string& path) {
  if (std::string why = not_an_hdf5_file_reason(path); !why.empty()) return why;
  const h5::File file = h5::open_file(path, false);
  return h5::read_attr_int(file, "embcache_format") ? "" : kNoFormat;
}

CacheFileReader::CacheFileReader(std::string path) : path_(std::move(path)) {
  // The checks of not_a_cache_reason, with the file opened once.
  if (const std::string why = not_an_hdf5_file_reason(path_); !why.empty()) {
    throw InputError(path_ + ": " + why + kReadAdvice);
  }
  file_ = h5::open_file(path_, false);
  const auto format = h5::read_attr_int(file_, "embcache_format");
  if (!format) throw InputError(path_ + ": " + kNoFormat + kReadAdvice);
  if (*format > kCacheFormatVersion) {
    throw InputError(path_ + ": cache format " + std::to_string(*format) +
                     " was written by a newer embcache; this one reads format " +
                     std::to_string(kCacheFormatVersion));
  }
  const auto signature_text = h5::read_attr_string(file_, "signature");
  try {
    signature_ = Signature::parse(signature_text.value_or(""));
  } catch (const nlohmann::json::exception&) {
    throw InputError(path_ + ": the cache's signature attribute is missing or not JSON");
  }
  version_ = h5::read_attr_string(file_, "embcache_version").value_or("?");
  if (const auto complete = h5::read_attr_int(file_, "complete")) complete_ = *complete != 0;
  content_id_ = h5::read_attr_string(file_, "content_id");
  storage_.dtype = storage_dtypes().parse(signature_.value("dtype", std::string("float32")), {"dtype"});
  storage_.compression =
      Compression::parse(h5::read_attr_string(file_, "compression").value_or("none"));
  labels_ = label_kinds_from_json(signature_.value("labels", nlohmann::json::object()));

  const auto window_dims = h5::dataset_dims(h5::open_dataset(file_, cache_paths::kWindow),
                                            path_ + ":/index/window");
  rows_ = std::int64_t(window_dims.at(0));

  for (const auto& name : signature_.value("levels", std::vector<std::string>{})) {
    const std::string ds_path = std::string(cache_paths::kLevels) + "/" + name;
    if (!h5::exists(file_, ds_path)) {
      throw InputError(path_ + ": level " + name + " is in the signature but /" + ds_path +
                       " is missing; the cache is damaged, rebuild it with --overwrite");
    }
    const h5::Dataset ds = h5::open_dataset(file_, ds_path);
    LevelSpec spec;
    spec.name = name;
    spec.index = h5::read_attr_int(ds, "level_index").value_or(0);
    spec.stride = h5::read_attr_int(ds, "stride").value_or(0);
    const auto dims = h5::dataset_dims(ds, path_ + ":/" + ds_path);
    if (std::int64_t(dims.at(0)) != rows_) {
      throw InputError(path_ + ": /" + ds_path + " has " + std::to_string(dims[0]) +
                       " rows but the index has " + std::to_string(rows_) +
                       "; the cache is damaged, rebuild it with --overwrite");
    }
    for (std::size_t i = 1; i < dims.size(); ++i) spec.row_shape.push_back(std::int64_t(dims[i]));
    spec.origin = read_origin(ds, spec, path_ + ":/" + ds_path);
    if (storage_.dtype == StorageDtype::kInt8) check_scales(spec);
    levels_.push_back(std::move(spec));
  }
}

CacheIndex CacheFileReader::read_index() const {
  CacheIndex index;
  const hsize_t n = hsize_t(rows_);
  index.groups = h5::read_strings(h5::open_dataset(file_, cache_paths::kGroup), 0, n, path_);
  index.windows = h5::read_strings(h5::open_dataset(file_, cache_paths::kWindow), 0, n, path_);
  index.splits = h5::read_strings(h5::open_dataset(file_, cache_paths::kSplit), 0, n, path_);
  index.bounds.resize(4 * n);
  index.pixel_hashes.resize(n);
  h5::read_rows(h5::open_dataset(file_, cache_paths::kBounds), h5::native<std::int64_t>(), 0, n,
                index.bounds.data(), path_);
  h5::read_rows(h5::open_dataset(file_, cache_paths::kPixelHash), h5::native<std::uint64_t>(), 0,
                n, index.pixel_hashes.data(), path_);
  return index;
}

std::int64_t CacheFileReader::row_feature_bytes() const {
  return embcache::row_feature_bytes(levels_, storage_.dtype);
}

namespace {

// Reads rows [start, start + count) of an uncompressed dataset chunk by chunk with H5Dread_chunk,
// verifying each chunk's fletcher32 ourselves (faster than HDF5's own check). Returns false
// when the layout does not allow it (compressed, or chunks that split rows): use H5Dread then.
bool read_rows_by_chunks(const h5::Dataset& ds, std::int64_t start, std::int64_t count, std::size_t row_bytes,
                         void* out, const std::string& where) {
  const h5::ChunkLayout layout = h5::chunk_layout(ds, where);
  if (!layout.chunked) return false;
  bool checksum = false;
  for (const H5Z_filter_t id : layout.filters) {
    if (id != H5Z_FILTER_FLETCHER32) return false;
    checksum = true;
  }
  const std::vector<hsize_t> dims = h5::dataset_dims(ds, where);
  const std::vector<hsize_t>& chunk = layout.chunk;
  for (std::size_t d = 1; d < dims.size(); ++d) {
    if (chunk[d] != dims[d]) return false;
  }
  const hsize_t chunk_rows = chunk[0];
  const std::size_t data_bytes = chunk_rows * row_bytes;
  std::vector<std::uint8_t> raw(data_bytes + (checksum ? 4 : 0));
  std::vector<hsize_t> offset(dims.size(), 0);
  auto* dest = static_cast<std::uint8_t*>(out);
  hsize_t row = hsize_t(start);
  const hsize_t end = hsize_t(start + count);
  while (row < end) {
    const hsize_t first = row / chunk_rows * chunk_rows;
    offset[0] = first;
    // Uncompressed chunks all have the same stored size, so no per-chunk size lookup. A chunk
    // that is not there (or any surprise) sends the whole read down HDF5's normal path.
    if (!h5::read_plain_chunk(ds, offset, raw.data(), raw.size())) return false;
    if (checksum) {
      if (!stored_checksum_matches(raw.data(), data_bytes)) {
        throw IoError(where + ": checksum mismatch in the chunk at row " + std::to_string(first) +
                      "; the file is corrupted (rebuild the cache with --overwrite)");
      }
    }
    const hsize_t take = std::min(end, first + chunk_rows) - row;
    std::memcpy(dest, raw.data() + (row - first) * row_bytes, take * row_bytes);
    dest += take * row_bytes;
    row += take;
  }
  return true;
}

}  // namespace

RowBatch CacheFileReader::read_rows(std::int64_t start, std::int64_t count) const {
  RowBatch batch;
  const hsize_t s = hsize_t(start), n = hsize_t(count);
  const h5::File& f = file_;
  batch.groups = h5::read_strings(h5::open_dataset(f, cache_paths::kGroup), s, n, path_);
  batch.windows = h5::read_strings(h5::open_dataset(f, cache_paths::kWindow), s, n, path_);
  batch.splits = h5::read_strings(h5::open_dataset(f, cache_paths::kSplit), s, n, path_);
  batch.bounds.resize(4 * n);
  batch.pixel_hashes.resize(n);
  h5::read_rows(h5::open_dataset(f, cache_paths::kBounds), h5::native<std::int64_t>(), s, n,
                batch.bounds.data(), path_);
  h5::read_rows(h5::open_dataset(f, cache_paths::kPixelHash), h5::native<std::uint64_t>(), s, n,
                batch.pixel_hashes.data(), path_);
  for (const auto& level : levels_) batch.levels.push_back(read_level(level, start, count));
  if (storage_.dtype == StorageDtype::kInt8) {
    for (const auto& level : levels_) batch.scales.push_back(read_scales(level, start, count));
  }
  if (labels_.has_class) {
    batch.label_class = at::empty({count}, at::kLong);
    h5::read_rows(h5::open_dataset(f, cache_paths::kLabelClass), h5::native<std::int64_t>(), s, n,
                  batch.label_class.data_ptr(), path_);
  }
  if (labels_.has_value) {
    batch.label_value = labels_.value_width > 0 ? at::empty({count, labels_.value_width}, at::kFloat)
                                                : at::empty({count}, at::kFloat);
    h5::read_rows(h5::open_dataset(f, cache_paths::kLabelValue), h5::native<float>(), s, n,
                  batch.label_value.data_ptr(), path_);
  }
  if (labels_.has_mask && count > 0) batch.label_mask = read_masks(start, count);
  if (labels_.has_pixel_value && count > 0) batch.label_pixel_value = read_pixel_values(start, count);
  return batch;
}

}  // namespace embcache

namespace embcache {

at::Tensor CacheFileReader::read_level(const LevelSpec& level, std::int64_t start, std::int64_t count) const {
  std::vector<std::int64_t> shape{count};
  shape.insert(shape.end(), level.row_shape.begin(), level.row_shape.end());
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(torch_type(storage_.dtype)));
  if (count == 0) return t;
  const std::string ds_path = std::string(cache_paths::kLevels) + "/" + level.name;
  const h5::Dataset ds = h5::open_dataset(file_, ds_path);
  const std::size_t row_bytes = std::size_t(t.numel() / count) * t.element_size();
  if (!read_rows_by_chunks(ds, start, count, row_bytes, t.data_ptr(), path_ + ":/" + ds_path)) {
    const h5::Datatype type = hdf5_type(storage_.dtype);
    h5::read_rows(ds, type, hsize_t(start), hsize_t(count), t.data_ptr(), path_ + ":/" + ds_path);
  }
  return t;
}

void CacheFileReader::check_scales(const LevelSpec& level) const {
  const std::string ds_path = std::string(cache_paths::kScales) + "/" + level.name;
  if (!h5::exists(file_, cache_paths::kScales) || !h5::exists(file_, ds_path)) {
    throw InputError(path_ + ": int8 level " + level.name + " has no /" + ds_path +
                     ", so it cannot be de-quantised; the cache is damaged, rebuild it with --overwrite");
  }
  const auto dims = h5::dataset_dims(h5::open_dataset(file_, ds_path), path_ + ":/" + ds_path);
  std::vector<std::int64_t> want{rows_};
  for (auto d : level.scale_shape()) want.push_back(d);
  if (std::vector<std::int64_t>(dims.begin(), dims.end()) != want) {
    throw InputError(path_ + ": /" + ds_path + " does not match level " + level.name + " (one scale per row" +
                     (level.is_map() ? " and channel" : "") + " expected); the cache is damaged, rebuild it with --overwrite");
  }
}

at::Tensor CacheFileReader::read_scales(const LevelSpec& level, std::int64_t start, std::int64_t count) const {
  std::vector<std::int64_t> shape{count};
  for (auto d : level.scale_shape()) shape.push_back(d);
  at::Tensor t = at::empty(shape, at::kFloat);
  if (count == 0) return t;
  const std::string ds_path = std::string(cache_paths::kScales) + "/" + level.name;
  h5::read_rows(h5::open_dataset(file_, ds_path), h5::native<float>(), hsize_t(start), hsize_t(count),
                t.data_ptr(), path_ + ":/" + ds_path);
  return t;
}

std::vector<std::int64_t> CacheFileReader::dense_shape(const char* name) const {
  const auto dims = h5::dataset_dims(h5::open_dataset(file_, name), path_ + ":/" + name);
  return {std::int64_t(dims.at(1)), std::int64_t(dims.at(2))};
}

at::Tensor CacheFileReader::read_dense(const char* name, h5::Type mem_type, at::ScalarType dtype, std::int64_t start,
                                       std::int64_t count) const {
  const auto hw = dense_shape(name);
  at::Tensor t = at::empty({count, hw.at(0), hw.at(1)}, dtype);
  if (count == 0) return t;
  h5::read_rows(h5::open_dataset(file_, name), mem_type, hsize_t(start), hsize_t(count), t.data_ptr(),
                path_ + ":/" + name);
  return t;
}

std::vector<std::int64_t> CacheFileReader::mask_shape() const {
  return labels_.has_mask ? dense_shape(cache_paths::kLabelMask) : std::vector<std::int64_t>{};
}

at::Tensor CacheFileReader::read_masks(std::int64_t start, std::int64_t count) const {
  return read_dense(cache_paths::kLabelMask, h5::native<std::int32_t>(), at::kInt, start, count);
}

std::vector<std::int64_t> CacheFileReader::pixel_value_shape() const {
  return labels_.has_pixel_value ? dense_shape(cache_paths::kLabelPixelValue) : std::vector<std::int64_t>{};
}

at::Tensor CacheFileReader::read_pixel_values(std::int64_t start, std::int64_t count) const {
  return read_dense(cache_paths::kLabelPixelValue, h5::native<float>(), at::kFloat, start, count);
}

std::int64_t CacheFileReader::chunk_rows() const {
  if (levels_.empty() || rows_ == 0) return 1;
  const h5::Dataset ds = h5::open_dataset(file_, std::string(cache_paths::kLevels) + "/" + levels_[0].name);
  const h5::ChunkLayout layout = h5::chunk_layout(ds, path_);
  if (!layout.chunked) return std::min<std::int64_t>(rows_, 64);
  return std::max<std::int64_t>(1, std::int64_t(layout.chunk[0]));
}

}  // namespace embcache
