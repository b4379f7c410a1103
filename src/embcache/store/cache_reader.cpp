#include "embcache/store/cache_reader.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>

#include "embcache/core/error.hpp"

namespace fs = std::filesystem;

namespace embcache {
namespace {

void append(std::vector<std::string>& to, std::vector<std::string> from) {
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}

// Why a part file cannot be used ("missing", "truncated: ..."), or "".
std::string part_problem(const std::string& path, std::int64_t bytes) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return "missing";
  if (std::int64_t(size) != bytes) {
    return "truncated or replaced: " + std::to_string(size) + " bytes, installed with " + std::to_string(bytes);
  }
  return "";
}

}  // namespace

CacheReader::CacheReader(std::string path, MissingParts missing, bool key_hashes) : meta_(std::move(path)) {
  dir_ = fs::absolute(meta_.path()).parent_path().string();
  format_ = h5::read_attr_int(meta_.file(), "embcache_format").value_or(1);
  if (!is_view_file(meta_.file())) {
    rows_ = meta_.rows();
    parts_.parts.push_back({fs::path(meta_.path()).filename().string(), rows_, 0, meta_.content_id().value_or(""),
                            "0/1", meta_.complete().value_or(true), meta_.signature().value("computed_with", nlohmann::json()), {}});
    parts_.segments.push_back({0, 0, rows_});
    view_starts_.push_back(0);
    return;
  }
  view_ = read_view_table(meta_.file(), meta_.path(), key_hashes);
  parts_.parts = view_->parts;
  std::vector<bool> usable(parts_.parts.size(), true);
  for (std::size_t p = 0; p < parts_.parts.size(); ++p) {
    const std::string problem = part_problem(dir_ + "/" + parts_.parts[p].file, parts_.parts[p].bytes);
    if (problem.empty()) continue;
    if (missing == MissingParts::kRefuse) {
      throw InputError(meta_.path() + ": part " + parts_.parts[p].file + " is " + problem + " (its " +
                       std::to_string(parts_.parts[p].rows) + " rows of shard " + parts_.parts[p].shard +
                       " cannot be read; the other parts are intact); rerun that precompute (--shard " +
                       parts_.parts[p].shard + ") to compute them again");
    }
    usable[p] = false;
    missing_.push_back(parts_.parts[p].file + " (" + problem + ")");
  }
  for (const RowSegment& s : view_->segments) {
    if (!usable[std::size_t(s.part)]) continue;
    view_starts_.push_back(rows_);
    parts_.segments.push_back(s);
    rows_ += s.count;
  }
  if (missing_.empty() && rows_ != meta_.rows()) {
    throw InputError(meta_.path() + ": the table of parts holds " + std::to_string(rows_) + " rows but the view " +
                     std::to_string(meta_.rows()) + "; the view is damaged (embcache compact cannot help: rebuild it)");
  }
}

CacheReader::~CacheReader() = default;

std::string CacheReader::part_path(std::size_t index) const {
  return view_ ? dir_ + "/" + parts_.parts.at(index).file : meta_.path();
}

std::shared_ptr<const CacheFileReader> CacheReader::part(std::size_t index) const {
  if (!view_) return std::shared_ptr<const CacheFileReader>(std::shared_ptr<void>(), &meta_);
  std::lock_guard<std::mutex> lock(open_mutex_);
  for (auto it = open_.begin(); it != open_.end(); ++it) {
    if (it->first != index) continue;
    auto found = *it;
    open_.erase(it);
    open_.push_back(found);
    return found.second;
  }
  std::shared_ptr<const CacheFileReader> reader;
  try {
    reader = std::make_shared<const CacheFileReader>(part_path(index));
  } catch (const Error& e) {
    throw InputError(meta_.path() + ": part " + parts_.parts[index].file + " cannot be read (" + e.what() +
                     "); rerun the precompute of shard " + parts_.parts[index].shard + " to compute its rows again");
  }
  if (reader->rows() != parts_.parts[index].rows) {
    throw InputError(meta_.path() + ": part " + parts_.parts[index].file + " holds " + std::to_string(reader->rows()) +
                     " rows, the table says " + std::to_string(parts_.parts[index].rows) + "; it was replaced");
  }
  if (open_.size() >= kOpenParts) open_.erase(open_.begin());
  open_.emplace_back(index, reader);
  return reader;
}

std::size_t CacheReader::segment_of(std::int64_t row) const {
  const auto it = std::upper_bound(view_starts_.begin(), view_starts_.end(), row);
  return std::size_t(it - view_starts_.begin()) - 1;
}

std::vector<CacheReader::Piece> CacheReader::pieces(std::int64_t start, std::int64_t count) const {
  std::vector<Piece> out;
  if (count <= 0) return out;
  if (start < 0 || start + count > rows_) throw std::out_of_range("CacheReader: rows outside the cache");
  for (std::size_t s = segment_of(start); s < parts_.segments.size() && count > 0; ++s) {
    const RowSegment& seg = parts_.segments[s];
    const std::int64_t offset = start - view_starts_[s];
    const std::int64_t take = std::min(count, seg.count - offset);
    if (take <= 0) continue;
    out.push_back({std::size_t(seg.part), start, seg.start + offset, take});
    start += take;
    count -= take;
  }
  return out;
}

template <class Read>
at::Tensor CacheReader::gather(std::int64_t start, std::int64_t count, const Read& read) const {
  const std::vector<Piece> ps = pieces(start, count);
  if (ps.size() == 1) return read(*part(ps[0].part), ps[0].start, ps[0].count);
  if (ps.empty()) return read(*part(0), 0, 0);
  std::vector<at::Tensor> blocks;
  for (const Piece& p : ps) blocks.push_back(read(*part(p.part), p.start, p.count));
  return at::cat(blocks);
}

CacheIndex CacheReader::read_index(std::int64_t start, std::int64_t count, IndexColumns columns) const {
  CacheIndex index;
  for (const Piece& p : pieces(start, count)) {
    const auto file = part(p.part);
    const h5::File& f = file->file();
    const std::string where = file->path();
    const hsize_t s = hsize_t(p.start), n = hsize_t(p.count);
    auto strings = [&](const char* name) { return h5::read_strings(h5::open_dataset(f, name), s, n, where); };
    if (columns.keys) {
      append(index.groups, strings(cache_paths::kGroup));
      append(index.windows, strings(cache_paths::kWindow));
      const std::size_t at = index.bounds.size();
      index.bounds.resize(at + 4 * n);
      h5::read_rows(h5::open_dataset(f, cache_paths::kBounds), h5::native<std::int64_t>(), s, n, index.bounds.data() + at,
                    where);
    }
    if (columns.splits) append(index.splits, strings(cache_paths::kSplit));
    if (columns.hashes) {
      const std::size_t at = index.pixel_hashes.size();
      index.pixel_hashes.resize(at + n);
      h5::read_rows(h5::open_dataset(f, cache_paths::kPixelHash), h5::native<std::uint64_t>(), s, n,
                    index.pixel_hashes.data() + at, where);
    }
  }
  return index;
}

RowBatch CacheReader::read_rows(std::int64_t start, std::int64_t count) const {
  const std::vector<Piece> ps = pieces(start, count);
  if (ps.size() == 1) return part(ps[0].part)->read_rows(ps[0].start, ps[0].count);
  if (ps.empty()) return part(0)->read_rows(0, 0);
  std::vector<RowBatch> batches;
  for (const Piece& p : ps) batches.push_back(part(p.part)->read_rows(p.start, p.count));
  RowBatch out;
  auto cat = [&](auto member) {
    std::vector<at::Tensor> ts;
    for (const auto& b : batches) {
      if ((b.*member).defined()) ts.push_back(b.*member);
    }
    return ts.empty() ? at::Tensor() : at::cat(ts);
  };
  for (auto& b : batches) {
    append(out.groups, std::move(b.groups));
    append(out.windows, std::move(b.windows));
    append(out.splits, std::move(b.splits));
    out.bounds.insert(out.bounds.end(), b.bounds.begin(), b.bounds.end());
    out.pixel_hashes.insert(out.pixel_hashes.end(), b.pixel_hashes.begin(), b.pixel_hashes.end());
  }
  for (std::size_t l = 0; l < batches.front().levels.size(); ++l) {
    std::vector<at::Tensor> ts;
    for (const auto& b : batches) ts.push_back(b.levels[l]);
    out.levels.push_back(at::cat(ts));
  }
  for (std::size_t l = 0; l < batches.front().scales.size(); ++l) {
    std::vector<at::Tensor> ts;
    for (const auto& b : batches) ts.push_back(b.scales[l]);
    out.scales.push_back(at::cat(ts));
  }
  out.label_class = cat(&RowBatch::label_class);
  out.label_value = cat(&RowBatch::label_value);
  out.label_mask = cat(&RowBatch::label_mask);
  out.label_pixel_value = cat(&RowBatch::label_pixel_value);
  return out;
}

at::Tensor CacheReader::read_level(const LevelSpec& level, std::int64_t start, std::int64_t count) const {
  return gather(start, count, [&](const CacheFileReader& f, std::int64_t s, std::int64_t n) { return f.read_level(level, s, n); });
}

at::Tensor CacheReader::read_scales(const LevelSpec& level, std::int64_t start, std::int64_t count) const {
  return gather(start, count, [&](const CacheFileReader& f, std::int64_t s, std::int64_t n) { return f.read_scales(level, s, n); });
}

at::Tensor CacheReader::read_masks(std::int64_t start, std::int64_t count) const {
  return gather(start, count, [&](const CacheFileReader& f, std::int64_t s, std::int64_t n) { return f.read_masks(s, n); });
}

at::Tensor CacheReader::read_targets(bool classes) const {
  const std::int64_t width = std::max<std::int64_t>(1, label_kinds().value_width);
  return gather(0, rows_, [&](const CacheFileReader& f, std::int64_t s, std::int64_t n) {
    at::Tensor t = classes ? at::empty({n}, at::kLong) : at::empty({n, width}, at::kFloat);
    if (n == 0) return t;
    h5::read_rows(h5::open_dataset(f.file(), classes ? cache_paths::kLabelClass : cache_paths::kLabelValue),
                  classes ? h5::native<std::int64_t>() : h5::native<float>(), hsize_t(s), hsize_t(n), t.data_ptr(), f.path());
    return t;
  });
}

at::Tensor CacheReader::read_pixel_values(std::int64_t start, std::int64_t count) const {
  return gather(start, count, [&](const CacheFileReader& f, std::int64_t s, std::int64_t n) { return f.read_pixel_values(s, n); });
}

std::int64_t CacheReader::chunk_rows() const {
  if (parts_.segments.empty()) return meta_.chunk_rows();
  return part(std::size_t(parts_.segments.front().part))->chunk_rows();
}

std::pair<std::int64_t, std::int64_t> CacheReader::chunk_around(std::int64_t row) const {
  const std::size_t s = segment_of(row);
  const RowSegment& seg = parts_.segments.at(s);
  const std::int64_t r = part(std::size_t(seg.part))->chunk_rows();
  const std::int64_t part_row = seg.start + (row - view_starts_[s]);
  const std::int64_t first = std::max(part_row / r * r, seg.start);
  const std::int64_t end = std::min(part_row / r * r + r, seg.start + seg.count);
  return {view_starts_[s] + (first - seg.start), view_starts_[s] + (end - seg.start)};
}

std::int64_t CacheReader::run_end(std::int64_t row) const {
  const std::size_t s = segment_of(row);
  return view_starts_[s] + parts_.segments.at(s).count;
}

std::int64_t CacheReader::level_storage_bytes(const LevelSpec& level) const {
  std::int64_t bytes = 0;
  for (std::size_t p = 0; p < parts_.parts.size(); ++p) {
    if (view_ && !std::any_of(parts_.segments.begin(), parts_.segments.end(),
                              [&](const RowSegment& s) { return s.part == std::int64_t(p); })) {
      continue;
    }
    const auto file = part(p);
    const h5::File& f = file->file();
    bytes += h5::storage_size(h5::open_dataset(f, std::string(cache_paths::kLevels) + "/" + level.name));
    if (storage().dtype == StorageDtype::kInt8) {
      bytes += h5::storage_size(h5::open_dataset(f, std::string(cache_paths::kScales) + "/" + level.name));
    }
  }
  return bytes;
}

}  // namespace embcache
