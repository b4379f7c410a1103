#include "embcache/store/cache_file_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "embcache/core/error.hpp"
#include "embcache/store/file_space.hpp"
#include "embcache/store/fletcher32.hpp"

namespace embcache {
namespace {

constexpr hsize_t kColumnChunkRows = 4096;

void check_rows(const at::Tensor& t, std::size_t rows, const std::string& what) {
  if (!t.defined() || t.dim() == 0 || std::size_t(t.size(0)) != rows || !t.is_contiguous()) {
    throw Error(ExitCode::kInternal, "row batch column " + what + " does not match the batch");
  }
}

// The level attributes that say what a level came from (docs/cache-format.md, "Levels").
void write_origin(const h5::Dataset& ds, const LevelOrigin& origin) {
  h5::write_attr(ds, "source", std::string(level_source_name(origin.source)));
  if (!origin.output.empty()) h5::write_attr(ds, "source_output", origin.output);
  if (origin.patch_size > 0) {
    h5::write_attr(ds, "patch_size", origin.patch_size);
    h5::write_attr(ds, "prefix_tokens", origin.prefix_tokens);
  }
  if (origin.token >= 0) h5::write_attr(ds, "token", origin.token);
  if (origin.time_steps > 0) h5::write_attr(ds, "time_steps", origin.time_steps);
}

}  // namespace

CacheFileWriter::CacheFileWriter(std::string path, const Signature& signature,
                                 std::vector<LevelSpec> levels, const LabelKinds& labels,
                                 const StorageOptions& storage, std::int64_t expected_rows)
    : path_(std::move(path)),
      levels_(std::move(levels)),
      labels_(labels),
      storage_(storage),
      expected_rows_(expected_rows) {
  file_ = h5::create_file(path_);
  const h5::File& root = file_;
  h5::write_attr(root, "embcache_format", format_version_needed(levels_, storage_.dtype));
  h5::write_attr(root, "embcache_version", std::string(EMBCACHE_VERSION));
  h5::write_attr(root, "signature", signature.dump());
  h5::write_attr(root, "compression", storage_.compression.to_string());
  // Plain copies of the most-read signature fields, for h5py users.
  h5::write_attr(root, "encoder_sha256", signature.value("encoder_sha256", std::string()));
  h5::write_attr(root, "dtype", to_string(storage_.dtype));

  const h5::Datatype text = h5::vlen_utf8_type();
  group_ = create_column(cache_paths::kGroup, text, {}, kColumnChunkRows);
  window_ = create_column(cache_paths::kWindow, text, {}, kColumnChunkRows);
  split_ = create_column(cache_paths::kSplit, text, {}, kColumnChunkRows);
  bounds_ = create_column(cache_paths::kBounds, h5::little_endian<std::int64_t>(), {4}, kColumnChunkRows);
  pixel_hash_ = create_column(cache_paths::kPixelHash, h5::little_endian<std::uint64_t>(), {}, kColumnChunkRows);

  storage_type_ = hdf5_type(storage_.dtype);
  h5::create_group(root, cache_paths::kLevels);
  const std::size_t elem = element_size(storage_.dtype);
  chunk_rows_ = hsize_t(1) << 30;
  for (const LevelSpec& level : levels_) {
    chunk_rows_ = std::min(chunk_rows_, capped(chunk_shape(level.row_shape, elem))[0]);
  }
  for (const LevelSpec& level : levels_) {
    const std::string name = std::string(cache_paths::kLevels) + "/" + level.name;
    std::vector<hsize_t> dims{0}, maxdims{H5S_UNLIMITED};
    for (auto d : level.row_shape) {
      dims.push_back(hsize_t(d));
      maxdims.push_back(hsize_t(d));
    }
    const h5::Dataspace space = h5::simple_space(dims, maxdims, name);
    std::vector<hsize_t> chunk = chunk_shape(level.row_shape, elem);
    chunk[0] = chunk_rows_;  // at most the level's own chunk rows: chunk_rows_ is their minimum
    const h5::PropertyList dcpl = feature_create_plist(chunk, storage_);
    h5::Dataset ds = h5::create_dataset(root, name, storage_type_, space, dcpl, path_ + ":/" + name);
    h5::write_attr(ds, "level_index", level.index);
    h5::write_attr(ds, "channels", level.row_shape.empty() ? 0 : level.row_shape[0]);
    h5::write_attr(ds, "stride", level.stride);
    write_origin(ds, level.origin);
    level_datasets_.push_back(std::move(ds));
    DirectLevel direct;
    direct.row_bytes = level.row_bytes(storage_.dtype);
    const bool whole_rows = level.row_shape.empty() || chunk[1] == hsize_t(level.row_shape[0]);
    direct.enabled = whole_rows && storage_.own_checksums();
    if (direct.enabled) direct.pending.resize(chunk_rows_ * direct.row_bytes + 4);
    direct_.push_back(std::move(direct));
  }
  if (storage_.dtype == StorageDtype::kInt8) {
    for (const LevelSpec& level : levels_) {
      std::vector<hsize_t> shape;
      for (auto d : level.scale_shape()) shape.push_back(hsize_t(d));
      scale_datasets_.push_back(create_column(std::string(cache_paths::kScales) + "/" + level.name, h5::little_endian<float>(),
                                              shape, chunk_rows_));
    }
  }
  if (labels_.has_class) {
    label_class_ = create_column(cache_paths::kLabelClass, h5::little_endian<std::int64_t>(), {}, kColumnChunkRows);
  }
  if (labels_.has_value) {
    std::vector<hsize_t> shape;
    if (labels_.value_width > 0) shape.push_back(hsize_t(labels_.value_width));
    label_value_ = create_column(cache_paths::kLabelValue, h5::little_endian<float>(), shape, kColumnChunkRows);
  }
  // Features are appended at the end of the file: space is reserved ahead of them, at most
  // 256 MiB (or what the expected rows take) past the end. Compressed sizes are unknown, and
  // compressing costs far more than allocating; files without levels are small.
  if (!levels_.empty() && storage_.compression.kind == Compression::Kind::kNone) {
    std::int64_t ahead = std::int64_t(256) << 20;
    if (expected_rows_ > 0) {
      const std::int64_t row_bytes = row_feature_bytes(levels_, storage_.dtype) + 64;  // + index, class label
      // One more chunk of rows for the partial last chunks, and room for HDF5's metadata.
      ahead = std::min(ahead, (expected_rows_ + std::int64_t(chunk_rows_)) * row_bytes + (std::int64_t(1) << 20));
    }
    reservation_ = std::make_unique<SpaceReservation>(ahead);
    reservation_->extend(file_descriptor());
  }
}

int CacheFileWriter::file_descriptor() const { return h5::file_descriptor(file_); }

h5::Dataset CacheFileWriter::create_column(const std::string& name, h5::Type type,
                                           std::vector<hsize_t> row_shape, hsize_t chunk_rows) {
  std::vector<hsize_t> dims{0}, maxdims{H5S_UNLIMITED}, chunk{capped({chunk_rows})[0]};
  for (auto d : row_shape) {
    dims.push_back(d);
    maxdims.push_back(d);
    chunk.push_back(d);
  }
  const auto slash = name.find('/');
  if (slash != std::string::npos && !h5::exists(file_, name.substr(0, slash))) {
    h5::create_group(file_, name.substr(0, slash));
  }
  const h5::Dataspace space = h5::simple_space(dims, maxdims, name);
  // HDF5 allows no filters, fletcher32 included, on variable-length strings.
  const h5::PropertyList dcpl = column_create_plist(chunk, !h5::type_info(type).variable_string);
  return h5::create_dataset(file_, name, type, space, dcpl, path_ + ":/" + name);
}

std::vector<hsize_t> CacheFileWriter::capped(std::vector<hsize_t> chunk) const {
  if (expected_rows_ > 0) chunk[0] = std::min<hsize_t>(chunk[0], hsize_t(expected_rows_));
  return chunk;
}

// A per-pixel label dataset [N, h, w] under /labels (created here when the dataset has no
// image-level labels).
h5::Dataset CacheFileWriter::create_dense_label_dataset(const char* name, h5::Type type, std::int64_t height,
                                                        std::int64_t width, const StorageOptions& storage) {
  const auto chunk = capped(chunk_shape({height, width}, 4));
  std::vector<hsize_t> dims{0, hsize_t(height), hsize_t(width)};
  std::vector<hsize_t> maxdims{H5S_UNLIMITED, hsize_t(height), hsize_t(width)};
  const h5::Dataspace space = h5::simple_space(dims, maxdims, path_ + ":/" + name);
  if (!h5::exists(file_, "labels")) h5::create_group(file_, "labels");
  const h5::PropertyList dcpl = feature_create_plist(chunk, storage);
  return h5::create_dataset(file_, name, type, space, dcpl, path_ + ":/" + name);
}

void CacheFileWriter::create_mask_dataset(std::int64_t height, std::int64_t width) {
  StorageOptions masks;  // masks are small integers: gzip shrinks them several-fold at no risk
  masks.compression.kind = Compression::Kind::kGzip;
  label_mask_ = create_dense_label_dataset(cache_paths::kLabelMask, h5::little_endian<std::int32_t>(), height, width, masks);
  h5::write_attr(label_mask_, "ignore_index", labels_.ignore_index);
}

void CacheFileWriter::create_pixel_value_dataset(std::int64_t height, std::int64_t width) {
  label_pixel_value_ = create_dense_label_dataset(cache_paths::kLabelPixelValue, h5::little_endian<float>(), height, width, StorageOptions{});
}

void CacheFileWriter::append(const RowBatch& batch, const std::function<void()>& between_chunks) {
  const std::size_t n = batch.size();
  if (n == 0) return;
  if (batch.groups.size() != n || batch.splits.size() != n || batch.bounds.size() != 4 * n ||
      batch.pixel_hashes.size() != n || batch.levels.size() != levels_.size()) {
    throw Error(ExitCode::kInternal, "row batch columns have different lengths");
  }
  // The index columns are small per row: they are gathered and written every few thousand rows
  // (and at close), not per batch: many small writes would cost the I/O thread more than the rows.
  auto gather = [](auto& into, const auto& from) { into.insert(into.end(), from.begin(), from.end()); };
  gather(index_.groups, batch.groups);
  gather(index_.windows, batch.windows);
  gather(index_.splits, batch.splits);
  gather(index_.bounds, batch.bounds);
  gather(index_.pixel_hashes, batch.pixel_hashes);
  if (index_.groups.size() >= kIndexRowsPerWrite) flush_index();
  if (reservation_) {
    std::int64_t upcoming = 0;
    for (const at::Tensor& t : batch.levels) upcoming += std::int64_t(t.nbytes());
    reservation_->extend(file_descriptor(), upcoming);
  }
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    const at::Tensor& t = batch.levels[i];
    check_rows(t, n, "levels/" + levels_[i].name);
    if (t.scalar_type() != torch_type(storage_.dtype)) {
      throw Error(ExitCode::kInternal, "level " + levels_[i].name + " is not in the storage dtype");
    }
    if (direct_[i].enabled) {
      const bool have_sums = batch.row_checksums.size() == levels_.size() && batch.row_checksums[i].size() == n;
      append_direct(i, static_cast<std::uint8_t*>(t.data_ptr()), n,
                    have_sums ? batch.row_checksums[i].data() : nullptr, between_chunks);
    } else {
      // The memory type equals the file type: HDF5 copies bytes, it never converts floats.
      h5::append_rows(level_datasets_[i], storage_type_, n, t.data_ptr(),
                      path_ + ":/levels/" + levels_[i].name);
    }
    feature_bytes_ += std::int64_t(t.nbytes());
  }
  if (!scale_datasets_.empty() && !levels_.empty()) {
    if (batch.scales.size() != levels_.size()) throw Error(ExitCode::kInternal, "an int8 row batch without its scales");
    for (std::size_t i = 0; i < levels_.size(); ++i) {
      const at::Tensor& t = batch.scales[i];
      check_rows(t, n, "scales/" + levels_[i].name);
      h5::append_rows(scale_datasets_[i], h5::native<float>(), n, t.data_ptr(), path_ + ":/scales/" + levels_[i].name);
      feature_bytes_ += std::int64_t(t.nbytes());
    }
  }
  if (labels_.has_class) {
    check_rows(batch.label_class, n, "labels/class");
    h5::append_rows(label_class_, h5::native<std::int64_t>(), n, batch.label_class.data_ptr(),
                    path_ + ":/labels/class");
  }
  if (labels_.has_value) {
    check_rows(batch.label_value, n, "labels/value");
    h5::append_rows(label_value_, h5::native<float>(), n, batch.label_value.data_ptr(),
                    path_ + ":/labels/value");
  }
  if (labels_.has_mask) {
    check_rows(batch.label_mask, n, "labels/mask");
    if (!label_mask_) create_mask_dataset(batch.label_mask.size(1), batch.label_mask.size(2));
    h5::append_rows(label_mask_, h5::native<std::int32_t>(), n, batch.label_mask.data_ptr(),
                    path_ + ":/labels/mask");
  }
  if (labels_.has_pixel_value) {
    check_rows(batch.label_pixel_value, n, "labels/pixel_value");
    if (!label_pixel_value_) create_pixel_value_dataset(batch.label_pixel_value.size(1), batch.label_pixel_value.size(2));
    h5::append_rows(label_pixel_value_, h5::native<float>(), n, batch.label_pixel_value.data_ptr(),
                    path_ + ":/labels/pixel_value");
  }
  rows_ += std::int64_t(n);
}

void CacheFileWriter::append_direct(std::size_t level, std::uint8_t* data, std::size_t rows,
                                    const std::uint32_t* row_sums, const std::function<void()>& between_chunks) {
  DirectLevel& d = direct_[level];
  const std::size_t chunk_rows = std::size_t(chunk_rows_);
  // Extend once for every full chunk this append completes (one metadata update, not one per chunk).
  const std::size_t full_rows = (d.pending_rows + rows) / chunk_rows * chunk_rows;
  if (full_rows > 0) {
    const std::string where = path_ + ":/levels/" + levels_[level].name;
    std::vector<hsize_t> dims = h5::dataset_dims(level_datasets_[level], where);
    dims[0] = hsize_t(d.rows_written) + full_rows;
    h5::set_extent(level_datasets_[level], dims, where);
  }
  while (rows > 0) {
    if (d.pending_rows == 0 && rows > chunk_rows) {
      // A whole chunk with more rows after it: written from the batch itself, no copy.
      write_chunk(level, data, row_sums);
      data += chunk_rows * d.row_bytes;
      if (row_sums) row_sums += chunk_rows;
      rows -= chunk_rows;
      if (between_chunks) between_chunks();
      continue;
    }
    const std::size_t take = std::min(rows, chunk_rows - d.pending_rows);
    // The rows' checksums come along while every pending row has one; else the chunk's is
    // computed here.
    if (row_sums && d.pending_sums.size() == d.pending_rows) {
      d.pending_sums.insert(d.pending_sums.end(), row_sums, row_sums + take);
    }
    std::memcpy(d.pending.data() + d.pending_rows * d.row_bytes, data, take * d.row_bytes);
    d.pending_rows += take;
    data += take * d.row_bytes;
    if (row_sums) row_sums += take;
    rows -= take;
    if (d.pending_rows == chunk_rows) {
      write_pending_chunk(level);
      if (between_chunks) between_chunks();
    }
  }
}

void CacheFileWriter::write_pending_chunk(std::size_t level) {
  DirectLevel& d = direct_[level];
  write_chunk(level, d.pending.data(), d.pending_sums.size() == d.pending_rows ? d.pending_sums.data() : nullptr);
  d.pending_rows = 0;
  d.pending_sums.clear();
}

void CacheFileWriter::write_chunk(std::size_t level, std::uint8_t* rows, const std::uint32_t* row_sums) {
  DirectLevel& d = direct_[level];
  const std::string where = path_ + ":/levels/" + levels_[level].name;
  const std::size_t chunk_rows = std::size_t(chunk_rows_);
  const std::size_t data_bytes = chunk_rows * d.row_bytes;
  if (!row_sums) ++chunks_checksummed_here_;
  const std::uint32_t sum = row_sums ? fletcher32_of_rows(row_sums, chunk_rows, d.row_bytes) : fletcher32(rows, data_bytes);
  // HDF5 stores the checksum right after the data, and H5Dwrite_chunk takes one buffer.
  std::uint8_t borrowed[4];
  std::memcpy(borrowed, rows + data_bytes, 4);
  for (int b = 0; b < 4; ++b) rows[data_bytes + std::size_t(b)] = std::uint8_t(sum >> (8 * b));
  std::vector<hsize_t> offset(levels_[level].row_shape.size() + 1, 0);
  offset[0] = hsize_t(d.rows_written);  // the extent was set by append_direct
  // The borrowed bytes go back even when the write fails.
  struct Restore {
    std::uint8_t* at;
    const std::uint8_t* saved;
    ~Restore() { std::memcpy(at, saved, 4); }
  } restore{rows + data_bytes, borrowed};
  h5::write_chunk(level_datasets_[level], offset, data_bytes + 4, rows, where);
  d.rows_written += std::int64_t(chunk_rows);
}

void CacheFileWriter::flush_pending_rows(std::size_t level) {
  DirectLevel& d = direct_[level];
  if (d.pending_rows == 0) return;
  // A partial last chunk: HDF5 writes it (and its checksum) the usual way.
  h5::append_rows(level_datasets_[level], storage_type_, d.pending_rows, d.pending.data(),
                  path_ + ":/levels/" + levels_[level].name);
  d.rows_written += std::int64_t(d.pending_rows);
  d.pending_rows = 0;
  d.pending_sums.clear();
}

void CacheFileWriter::start_writeback(bool drop) {
  if (!file_) return;
  const int fd = file_descriptor();
  if (fd < 0) return;
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end > writeback_offset_) {
    // Only the bytes added since the last call: rescanning the whole file each time blocks.
    if (!writeback_) writeback_ = std::make_unique<BackgroundWriteback>();
    writeback_->request(fd, writeback_offset_, end - writeback_offset_, drop);
    writeback_offset_ = end;
  }
}

void CacheFileWriter::flush_index() {
  const hsize_t n = index_.groups.size();
  if (n == 0) return;
  h5::append_strings(group_, index_.groups, path_ + ":/index/group");
  h5::append_strings(window_, index_.windows, path_ + ":/index/window");
  h5::append_strings(split_, index_.splits, path_ + ":/index/split");
  h5::append_rows(bounds_, h5::native<std::int64_t>(), n, index_.bounds.data(), path_ + ":/index/bounds");
  h5::append_rows(pixel_hash_, h5::native<std::uint64_t>(), n, index_.pixel_hashes.data(), path_ + ":/index/pixel_hash");
  index_ = RowBatch();
}

void CacheFileWriter::flush() {
  if (file_) h5::flush(file_, path_);
}

std::int64_t CacheFileWriter::written_chunks(std::size_t level) const {
  const DirectLevel& d = direct_.at(level);
  return d.enabled ? d.rows_written / std::int64_t(chunk_rows_) : 0;
}

CacheFileWriter::ChunkLocation CacheFileWriter::chunk_location(std::size_t level, std::int64_t chunk) const {
  std::vector<hsize_t> offset(levels_.at(level).row_shape.size() + 1, 0);
  offset[0] = hsize_t(chunk) * chunk_rows_;
  const std::string where = path_ + ":/levels/" + levels_[level].name;
  const h5::ChunkLocation at = h5::chunk_location(level_datasets_[level], offset, where);
  if (at.address == HADDR_UNDEF || at.filter_mask != 0) {
    throw Error(ExitCode::kInternal, where + ": chunk " + std::to_string(chunk) + " is not stored as written");
  }
  return {std::uint64_t(at.address), std::uint64_t(at.size)};
}

std::vector<std::uint8_t> CacheFileWriter::rows_bytes(std::size_t level, std::int64_t first) const {
  const DirectLevel& d = direct_.at(level);
  const std::size_t row_bytes = levels_[level].row_bytes(storage_.dtype);
  if (d.enabled) {
    if (first != d.rows_written) {
      throw Error(ExitCode::kInternal, "rows_bytes: rows before the pending chunk were asked for");
    }
    return std::vector<std::uint8_t>(d.pending.begin(), d.pending.begin() + std::ptrdiff_t(d.pending_rows * row_bytes));
  }
  const std::int64_t count = rows_ - first;
  std::vector<std::uint8_t> bytes(std::size_t(count) * row_bytes);
  if (count > 0) {
    h5::read_rows(level_datasets_[level], storage_type_, hsize_t(first), hsize_t(count), bytes.data(),
                  path_ + ":/levels/" + levels_[level].name);
  }
  return bytes;
}

void CacheFileWriter::set_complete(bool complete) {
  h5::write_attr(file_, "complete", std::int64_t(complete ? 1 : 0));
}

void CacheFileWriter::set_content_id(const std::string& id) { h5::write_attr(file_, "content_id", id); }

void CacheFileWriter::close() {
  if (!file_) return;
  flush_index();
  for (std::size_t i = 0; i < direct_.size(); ++i) {
    if (direct_[i].enabled) flush_pending_rows(i);
  }
  h5::flush(file_, path_);
  if (writeback_) writeback_->drain();  // it uses the file descriptor that H5Fclose closes
  group_.reset(); window_.reset(); split_.reset(); bounds_.reset(); pixel_hash_.reset();
  level_datasets_.clear();
  scale_datasets_.clear();
  label_class_.reset(); label_value_.reset(); label_mask_.reset(); label_pixel_value_.reset();
  // Close explicitly to see the error (disk full shows up here as often as in writes).
  h5::close_file(file_, path_);
  if (reservation_) reservation_->release(path_);
}

}  // namespace embcache
