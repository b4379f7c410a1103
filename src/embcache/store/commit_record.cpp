#include "embcache/store/commit_record.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cerrno>
#include <cstring>

#include "embcache/core/error.hpp"
#include "embcache/store/cache_file_writer.hpp"
#include "embcache/store/fletcher32.hpp"

namespace embcache {
namespace {

constexpr const char* kCommitGroup = "commit";

std::string level_group(std::size_t level) { return std::string(kCommitGroup) + "/level_" + std::to_string(level); }

// A 1-D or 2-D dataset written whole (contiguous; records are small and written once).
void write_array(h5::Location loc, const std::string& name, h5::Type file_type, h5::Type mem_type, std::vector<hsize_t> dims,
                 const void* data, const std::string& where) {
  const h5::Dataspace space = h5::simple_space(dims, {}, where + ":/" + name);
  const h5::Dataset ds = h5::create_dataset(loc, name, file_type, space, where + ":/" + name);
  h5::write_whole(ds, mem_type, data, where + ":/" + name);
}

nlohmann::json levels_to_json(const std::vector<LevelSpec>& levels) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& l : levels) {
    const LevelOrigin& o = l.origin;
    j.push_back({{"name", l.name}, {"index", l.index}, {"stride", l.stride}, {"row_shape", l.row_shape},
                 {"source", level_source_name(o.source)}, {"source_output", o.output}, {"patch_size", o.patch_size},
                 {"prefix_tokens", o.prefix_tokens}, {"token", o.token}, {"time_steps", o.time_steps}});
  }
  return j;
}

// Records written by builds before format 2 hold no origin: a map or vector by its rank.
LevelSpec level_from_json(const nlohmann::json& l) {
  LevelSpec spec;
  spec.name = l.at("name").get<std::string>();
  spec.index = l.at("index").get<std::int64_t>();
  spec.stride = l.at("stride").get<std::int64_t>();
  spec.row_shape = l.at("row_shape").get<std::vector<std::int64_t>>();
  LevelOrigin& o = spec.origin;
  o.output = l.value("source_output", spec.name);
  o.time_steps = l.value("time_steps", std::int64_t(0));
  o.source = default_level_source(spec.row_shape.size(), o.time_steps);
  if (l.contains("source")) o.source = parse_level_source(l.at("source").get<std::string>());
  o.patch_size = l.value("patch_size", std::int64_t(0));
  o.prefix_tokens = l.value("prefix_tokens", std::int64_t(0));
  o.token = l.value("token", std::int64_t(-1));
  return spec;
}

}  // namespace

void write_commit_record(const std::string& path, const Signature& signature, const LabelKinds& labels,
                         const std::vector<RowBatch>& parts, std::int64_t first_row, std::int64_t chunk_rows,
                         const std::vector<LevelSpec>& levels, const std::vector<RecordedLevel>& recorded) {
  std::int64_t rows = 0;
  for (const auto& part : parts) rows += std::int64_t(part.size());
  {
    // Index and labels: a cache file without levels, so the ordinary reader reads it back.
    Signature without_levels = signature;
    without_levels["levels"] = nlohmann::json::array();
    StorageOptions plain;
    plain.dtype = storage_dtypes().parse(signature.value("dtype", std::string("float32")), {"dtype"});
    CacheFileWriter writer(path, without_levels, {}, labels, plain, rows);
    for (const RowBatch& part : parts) {
      RowBatch index = part;
      index.levels.clear();
      index.scales.clear();
      index.row_checksums.clear();
      writer.append(index);
    }
    writer.close();
  }
  const bool int8 = storage_dtypes().parse(signature.value("dtype", std::string("float32")), {"dtype"}) == StorageDtype::kInt8;
  h5::File file = h5::open_file(path, true);
  h5::Group group = h5::create_group(file, kCommitGroup);
  h5::write_attr(group, "first_row", first_row);
  h5::write_attr(group, "chunk_rows", chunk_rows);
  h5::write_attr(group, "levels", levels_to_json(levels).dump());
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    const RecordedLevel& r = recorded[i];
    const h5::Group level = h5::create_group(file, level_group(i));
    std::vector<std::int64_t> table;
    for (std::size_t k = 0; k < r.chunks.size(); ++k) {
      table.push_back(r.chunks[k]);
      table.push_back(std::int64_t(r.addresses[k]));
      table.push_back(std::int64_t(r.sizes[k]));
    }
    write_array(level, "chunks", h5::little_endian<std::int64_t>(), h5::native<std::int64_t>(), {hsize_t(r.chunks.size()), 3}, table.data(), path);
    write_array(level, "tail", h5::little_endian<std::uint8_t>(), h5::native<std::uint8_t>(), {hsize_t(r.tail.size())}, r.tail.data(), path);
    h5::write_attr(level, "tail_first", r.tail_first);
    if (int8) {
      // The committed rows' scales, whole: they are small (one float per row and channel).
      std::vector<at::Tensor> scales;
      for (const RowBatch& part : parts) scales.push_back(part.scales.at(i));
      const at::Tensor all = at::cat(scales).contiguous();
      std::vector<hsize_t> dims(all.sizes().begin(), all.sizes().end());
      write_array(level, "scales", h5::little_endian<float>(), h5::native<float>(), dims, all.data_ptr(), path);
    }
  }
  group = h5::Group();
  h5::close_file(file, path);
}

RecordedChunks::RecordedChunks(std::string file) : file_(std::move(file)) {
  fd_ = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    throw IoError("cannot open " + file_ + ", which committed work of an interrupted run refers to: " +
                  std::strerror(errno) + "; rerun with --overwrite to start over");
  }
}

RecordedChunks::~RecordedChunks() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordedChunks::add(std::size_t level, std::int64_t chunk, std::uint64_t address, std::uint64_t size) {
  chunks_[{level, chunk}] = {address, size};
}

bool RecordedChunks::has(std::size_t level, std::int64_t chunk) const { return chunks_.count({level, chunk}) > 0; }

void RecordedChunks::read(std::size_t level, std::int64_t chunk_rows, std::size_t row_bytes, std::int64_t row,
                          std::int64_t count, std::uint8_t* dest) const {
  const std::int64_t chunk = row / chunk_rows;
  const auto key = std::make_pair(level, chunk);
  if (cached_ != key) {
    const auto& [address, size] = chunks_.at(key);
    const std::size_t data_bytes = std::size_t(chunk_rows) * row_bytes;
    if (size != data_bytes + 4) {
      throw InputError(file_ + ": a commit record gives chunk " + std::to_string(chunk) + " a size of " +
                       std::to_string(size) + " bytes, not " + std::to_string(data_bytes + 4) +
                       "; the interrupted run's work is damaged, rerun with --overwrite");
    }
    buffer_.resize(size);
    std::size_t done = 0;
    while (done < size) {
      const ssize_t got = ::pread(fd_, buffer_.data() + done, size - done, off_t(address + done));
      if (got <= 0) {
        throw IoError("cannot read " + file_ + " at byte " + std::to_string(address + done) + ": " +
                      (got == 0 ? std::string("the file is shorter than its commit records say") : std::strerror(errno)) +
                      "; rerun with --overwrite to start over");
      }
      done += std::size_t(got);
    }
    if (!stored_checksum_matches(buffer_.data(), data_bytes)) {
      throw IoError(file_ + ": checksum mismatch in committed chunk " + std::to_string(chunk) + " of level " +
                    std::to_string(level) + "; the disk lost committed data, rerun with --overwrite");
    }
    cached_ = key;
  }
  const std::int64_t offset = row - chunk * chunk_rows;
  std::memcpy(dest, buffer_.data() + std::size_t(offset) * row_bytes, std::size_t(count) * row_bytes);
}

CommittedRows::CommittedRows(std::string path, std::shared_ptr<RecordedChunks> chunks)
    : reader_(std::move(path)), chunks_(std::move(chunks)) {
  const std::string& where = reader_.path();
  const h5::File& file = reader_.file();
  if (!h5::exists(file, kCommitGroup)) {
    throw InputError(where + ": not a commit record (no /commit); remove it, or rerun with --overwrite");
  }
  const h5::Group group = h5::open_group(file, kCommitGroup);
  first_row_ = h5::read_attr_int(group, "first_row").value_or(0);
  chunk_rows_ = std::max<std::int64_t>(1, h5::read_attr_int(group, "chunk_rows").value_or(1));
  try {
    for (const auto& l : nlohmann::json::parse(h5::read_attr_string(group, "levels").value_or("[]"))) {
      levels_.push_back(level_from_json(l));
    }
  } catch (const InputError&) {
    throw InputError(where + ": the commit record's level list names a level source this build does not know; "
                     "rerun with the embcache that was interrupted, or with --overwrite");
  } catch (const nlohmann::json::exception&) {
    throw InputError(where + ": the commit record's level list is not valid; rerun with --overwrite");
  }
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    const h5::Group level = h5::open_group(file, level_group(i));
    tail_first_.push_back(h5::read_attr_int(level, "tail_first").value_or(first_row_));
    const h5::Dataset table = h5::open_dataset(level, "chunks");
    const auto dims = h5::dataset_dims(table, where + ":/" + level_group(i) + "/chunks");
    std::vector<std::int64_t> values(dims.at(0) * 3);
    if (!values.empty()) {
      h5::read_rows(table, h5::native<std::int64_t>(), 0, dims[0], values.data(), where);
    }
    for (std::size_t k = 0; k < dims[0]; ++k) {
      chunks_->add(i, values[3 * k], std::uint64_t(values[3 * k + 1]), std::uint64_t(values[3 * k + 2]));
    }
  }
}

std::int64_t CommittedRows::row_feature_bytes() const {
  return embcache::row_feature_bytes(levels_, reader_.storage().dtype);
}

RowBatch CommittedRows::read_rows(std::int64_t start, std::int64_t count) const {
  RowBatch batch = reader_.read_rows(start, count);  // index and labels
  const StorageDtype dtype = reader_.storage().dtype;
  const std::string& where = reader_.path();
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    const std::size_t row_bytes = levels_[i].row_bytes(dtype);
    std::vector<std::int64_t> shape{count};
    shape.insert(shape.end(), levels_[i].row_shape.begin(), levels_[i].row_shape.end());
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(torch_type(dtype)));
    auto* dest = static_cast<std::uint8_t*>(t.data_ptr());
    std::int64_t row = first_row_ + start;  // a row of the file being built
    const std::int64_t end = row + count;
    while (row < end) {
      const std::int64_t chunk = row / chunk_rows_;
      const std::int64_t take = std::min(end, (chunk + 1) * chunk_rows_) - row;
      if (chunks_->has(i, chunk)) {
        chunks_->read(i, chunk_rows_, row_bytes, row, take, dest);
      } else {
        if (row < tail_first_[i]) {
          throw InputError(where + ": row " + std::to_string(row) + " of level " + levels_[i].name +
                           " is in neither a recorded chunk nor the record; rerun with --overwrite");
        }
        const h5::Dataset tail = h5::open_dataset(reader_.file(), level_group(i) + "/tail");
        h5::read_rows(tail, h5::native<std::uint8_t>(), hsize_t(row - tail_first_[i]) * row_bytes,
                      hsize_t(take) * row_bytes, dest, where);
      }
      dest += std::size_t(take) * row_bytes;
      row += take;
    }
    batch.levels.push_back(std::move(t));
    if (dtype == StorageDtype::kInt8) {
      std::vector<std::int64_t> scale_shape{count};
      for (auto d : levels_[i].scale_shape()) scale_shape.push_back(d);
      at::Tensor scales = at::empty(scale_shape, at::kFloat);
      if (count > 0) {
        const h5::Dataset ds = h5::open_dataset(reader_.file(), level_group(i) + "/scales");
        h5::read_rows(ds, h5::native<float>(), hsize_t(start), hsize_t(count), scales.data_ptr(), where);
      }
      batch.scales.push_back(std::move(scales));
    }
  }
  return batch;
}

}  // namespace embcache
