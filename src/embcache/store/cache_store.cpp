#include "embcache/store/cache_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <random>

#include "embcache/core/crop_key.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/file_lock.hpp"
#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/commit_record.hpp"

namespace fs = std::filesystem;

namespace embcache {
namespace {

// 128 random bits in hex: a new name for a new set of rows.
std::string new_content_id() {
  std::random_device device;
  char text[33];
  for (int i = 0; i < 4; ++i) std::snprintf(text + 8 * i, 9, "%08x", unsigned(device()));
  return text;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string errno_text() { return std::strerror(errno); }

constexpr const char* kSegmentPrefix = "seg-";
constexpr const char* kSegmentSuffix = ".h5";
constexpr const char* kPartialSuffix = ".partial";
constexpr const char* kNextFile = "next.h5";
constexpr std::int64_t kWritebackBytes = std::int64_t(32) << 20;

std::string key_of(const CacheIndex& index, std::size_t row) {
  CropKey key{index.groups[row], index.windows[row],
              {index.bounds[4 * row], index.bounds[4 * row + 1], index.bounds[4 * row + 2],
               index.bounds[4 * row + 3]}};
  return key.map_key();
}

// Rows per read when copying `source`: blocks of about 64 MiB of features.
std::int64_t rows_per_block(const RowSource& source) {
  return std::max<std::int64_t>(1, (std::int64_t(64) << 20) / std::max<std::int64_t>(source.row_feature_bytes(), 1));
}

// --out and --overwrite touch caches only: a typo must never replace a dataset or another file.
void refuse_non_cache(const std::string& path) {
  if (const std::string why = not_a_cache_reason(path); !why.empty()) {
    throw InputError(path + ": " + why + "; embcache never replaces other files: choose another --out");
  }
}

void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
}

bool ends_with(const std::string& text, const char* suffix) {
  const std::size_t n = std::strlen(suffix);
  return text.size() > n && text.compare(text.size() - n, n, suffix) == 0;
}

// The commit records in `dir` (seg-N.h5), oldest first. A `.partial` record was never renamed,
// so never committed: removed with `remove_partial` (the writer, holding the lock), else skipped.
std::vector<std::string> commit_records_in(const std::string& dir, bool remove_partial) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (ends_with(name, kPartialSuffix)) {
      if (remove_partial) remove_quietly(entry.path().string());
      continue;
    }
    if (name.rfind(kSegmentPrefix, 0) != 0 || !ends_with(name, kSegmentSuffix)) continue;
    found.emplace_back(std::atoll(name.c_str() + std::strlen(kSegmentPrefix)), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> records;
  for (const auto& [number, file] : found) records.push_back(file);
  return records;
}

}  // namespace

void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open " + path + " to sync it: " + errno_text());
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw IoError("cannot sync " + path + ": " + std::strerror(saved));
}

std::int64_t pending_commit_records(const std::string& cache_path) {
  return std::int64_t(commit_records_in(cache_path + ".segments", /*remove_partial=*/false).size());
}

std::string cache_shortfall(const CacheFileReader& cache) {
  if (pending_commit_records(cache.path()) > 0) {
    return cache.path() + ": a precompute into it is at work or was interrupted, and rows it committed are "
           "not in the file yet; rerun that precompute to install them";
  }
  if (cache.complete() == false) {
    return cache.path() + ": the precompute that wrote it was interrupted, so crops are missing; rerun "
           "that precompute to finish it";
  }
  return "";
}

CacheStore::CacheStore(std::string path, Signature wanted, LabelKinds labels,
                       StorageOptions storage, CommitPolicy policy, bool overwrite)
    : path_(std::move(path)),
      segments_dir_(path_ + ".segments"),
      wanted_(std::move(wanted)),
      labels_(labels),
      storage_(storage),
      policy_(policy) {
  next_path_ = segments_dir_ + "/" + kNextFile;
  const fs::path parent = fs::absolute(path_).parent_path();
  if (!fs::is_directory(parent)) {
    throw IoError(path_ + ": directory " + parent.string() + " does not exist; create it first");
  }
  if (fs::is_directory(path_)) throw IoError(path_ + ": is a directory; --out must name a file");
  lock_ = std::make_unique<FileLock>(path_ + ".lock",
                                     "the cache is being written by another embcache process; wait for it to finish",
                                     "the cache's directory must be writable (choose another --out)");

  // Leftovers of a crashed run are never trusted: a half-written copy or commit record.
  remove_quietly(path_ + ".tmp");
  if (overwrite) {
    if (fs::exists(path_)) refuse_non_cache(path_);
    std::error_code ec;
    fs::remove_all(segments_dir_, ec);
    if (fs::exists(path_)) {
      if (!fs::remove(path_, ec)) throw IoError("cannot remove " + path_ + ": " + ec.message());
    }
  }

  main_exists_ = fs::exists(path_);
  if (main_exists_) {
    refuse_non_cache(path_);
    CacheFileReader reader(path_);
    const auto differences = signature_differences(reader.signature(), wanted_);
    if (!differences.empty()) {
      std::string fields;
      for (const auto& f : differences) fields += (fields.empty() ? "" : ", ") + f;
      // A re-export of the same model is the common surprise: TorchScript writes a module's
      // constants in Python's string-hash order, which changes from one Python process to the next.
      const bool encoder_file = std::find(differences.begin(), differences.end(), "encoder_sha256") != differences.end();
      throw SignatureMismatch(path_ + ": this cache was made with a different " + fields,
                              encoder_file ? " (a re-exported encoder is a different file unless exported with "
                                             "PYTHONHASHSEED=0 set)"
                                           : "");
    }
    storage_.compression = reader.storage().compression;  // a cache keeps its compression
    existing_levels_ = reader.levels();
  }

  if (fs::is_directory(segments_dir_)) recover(commit_records_in(segments_dir_, /*remove_partial=*/true));
  if (main_exists_) {
    CacheFileReader reader(path_);
    read_committed(reader);
    if (existing_levels_.empty()) existing_levels_ = reader.levels();
  }
  if (!existing_levels_.empty()) adopt_levels(existing_levels_);
}

void CacheStore::recover(const std::vector<std::string>& records) {
  if (records.empty() || !fs::exists(next_path_)) {
    // Without records nothing in next.h5 was committed. Records without next.h5 belong to a run
    // that installed it as the cache and died before removing them: their rows are in the cache.
    records_ = records;
    remove_run_files();
    return;
  }
  auto chunks = std::make_shared<RecordedChunks>(next_path_);
  std::vector<std::unique_ptr<RowSource>> sources;
  if (main_exists_) sources.push_back(std::make_unique<CacheFileReader>(path_));
  std::int64_t rows = 0;
  for (const auto& file : records) {
    auto record = std::make_unique<CommittedRows>(file, chunks);
    const auto differences = signature_differences(record->signature(), wanted_);
    if (!differences.empty()) {
      throw InputError(path_ + ": uncommitted work in " + segments_dir_ + " was made with a different " +
                       differences.front() + "; rerun with the original options to finish it, or --overwrite");
    }
    if (existing_levels_.empty()) existing_levels_ = record->levels();
    rows += record->rows();
    sources.push_back(std::move(record));
  }
  if (!existing_levels_.empty()) adopt_levels(existing_levels_);
  records_ = records;
  merge_into_cache(std::move(sources), /*complete=*/false, new_content_id());  // the run that made them was cut short
  recovered_rows_ = rows;
}

void CacheStore::adopt_levels(std::vector<LevelSpec> levels) {
  nlohmann::json names = nlohmann::json::array();
  for (const auto& level : levels) names.push_back(level.name);
  wanted_["levels"] = names;
  levels_ = std::move(levels);
}

CacheStore::~CacheStore() {
  abandon();
  std::error_code ec;
  if (fs::is_directory(segments_dir_, ec) && fs::is_empty(segments_dir_, ec)) fs::remove(segments_dir_, ec);
}

void CacheStore::read_committed(const RowSource& source) {
  const CacheIndex index = source.read_index();
  for (std::size_t row = 0; row < index.windows.size(); ++row) {
    committed_[key_of(index, row)] = index.pixel_hashes[row];
  }
}

std::string CacheStore::segment_path(std::int64_t number) const {
  char name[32];
  std::snprintf(name, sizeof name, "%s%08lld%s", kSegmentPrefix, (long long)number, kSegmentSuffix);
  return segments_dir_ + "/" + name;
}

void CacheStore::set_levels(std::vector<LevelSpec> levels) {
  if (!existing_levels_.empty()) {
    for (const LevelSpec& level : levels) {
      auto it = std::find_if(existing_levels_.begin(), existing_levels_.end(),
                             [&](const LevelSpec& e) { return e.name == level.name; });
      if (it != existing_levels_.end() && it->row_shape != level.row_shape) {
        throw InputError(path_ + ": level " + level.name + " is stored with shape " +
                         it->shape_text() + " but the encoder now produces " + level.shape_text() +
                         " (another crop size or input?); use another --out or --overwrite");
      }
    }
  }
  adopt_levels(std::move(levels));
}

StorageOptions CacheStore::building_storage() const {
  StorageOptions building = storage_;
  building.compression = Compression{};
  return building;
}

void CacheStore::start_building() {
  std::error_code ec;
  fs::create_directories(segments_dir_, ec);
  if (ec) throw IoError("cannot create " + segments_dir_ + ": " + ec.message());
  // Built uncompressed: its chunks are written whole by us, and committed chunks are never
  // rewritten. A compressed cache is compressed once, by the copy at the end.
  const StorageOptions building = building_storage();
  std::unique_ptr<CacheFileReader> old;
  if (main_exists_) old = std::make_unique<CacheFileReader>(path_);
  const std::int64_t old_rows = old ? old->rows() : 0;
  next_ = std::make_unique<CacheFileWriter>(next_path_, wanted_, levels_, labels_, building,
                                            expected_rows_ > 0 ? old_rows + expected_rows_ : 0);
  if (old) {
    // The old rows come first; the old cache stays the cache until the new file replaces it.
    const std::int64_t block = rows_per_block(*old);
    for (std::int64_t row = 0; row < old_rows; row += block) {
      next_->append(old->read_rows(row, std::min(block, old_rows - row)));
    }
  }
  uncommitted_first_ = next_->rows();
  uncommitted_.clear();
  uncommitted_bytes_ = 0;
  recorded_chunks_.assign(levels_.size(), 0);
  last_commit_ = now_seconds();
  writeback_mark_ = next_->feature_bytes();
}

void CacheStore::append(const RowBatch& batch, const std::function<void()>& between_chunks) {
  if (batch.size() == 0) return;
  if (!next_) start_building();
  const std::int64_t checksummed_before = next_->chunks_checksummed_here();
  next_->append(batch, between_chunks);
  checksummed_while_writing_ += next_->chunks_checksummed_here() - checksummed_before;
  RowBatch index = batch;
  index.levels.clear();
  index.row_checksums.clear();
  for (std::size_t row = 0; row < batch.size(); ++row) {
    CropKey key{batch.groups[row], batch.windows[row],
                {batch.bounds[4 * row], batch.bounds[4 * row + 1], batch.bounds[4 * row + 2], batch.bounds[4 * row + 3]}};
    if (committed_.count(key.map_key())) ++superseded_;
  }
  uncommitted_.push_back(std::move(index));
  uncommitted_bytes_ += batch.feature_bytes();
  if ((policy_.fsync || policy_.drop_behind) && next_->feature_bytes() - writeback_mark_ >= kWritebackBytes) {
    next_->start_writeback(policy_.drop_behind);
    writeback_mark_ = next_->feature_bytes();
  }
  if (uncommitted_bytes_ >= policy_.segment_bytes || now_seconds() - last_commit_ >= policy_.segment_seconds) {
    commit();
  }
}

void CacheStore::commit() {
  if (!next_ || uncommitted_.empty()) return;
  // 1. Every appended byte reaches the file, and the disk.
  next_->flush();
  if (policy_.fsync) sync_path(next_path_);
  // 2. The record: where the finished chunks are, and the rows no finished chunk holds yet.
  std::vector<RecordedLevel> recorded(levels_.size());
  std::vector<std::int64_t> written(levels_.size(), 0);
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    RecordedLevel& r = recorded[i];
    if (next_->whole_chunks(i)) {
      written[i] = next_->written_chunks(i);
      for (std::int64_t chunk = recorded_chunks_[i]; chunk < written[i]; ++chunk) {
        const auto location = next_->chunk_location(i, chunk);
        r.chunks.push_back(chunk);
        r.addresses.push_back(location.address);
        r.sizes.push_back(location.size);
      }
      r.tail_first = written[i] * next_->chunk_rows();
    } else {
      r.tail_first = uncommitted_first_;
    }
    r.tail = next_->rows_bytes(i, r.tail_first);
  }
  const std::string final_path = segment_path(next_segment_);
  const std::string partial = final_path + kPartialSuffix;
  try {
    write_commit_record(partial, wanted_, labels_, uncommitted_, uncommitted_first_, next_->chunk_rows(), levels_,
                        recorded);
    if (policy_.fsync) sync_path(partial);
    // 3. The rename is the commit.
    if (::rename(partial.c_str(), final_path.c_str()) != 0) {
      throw IoError("cannot rename " + partial + " to " + final_path + ": " + errno_text());
    }
  } catch (...) {
    remove_quietly(partial);
    throw;
  }
  if (policy_.fsync) sync_path(segments_dir_);
  records_.push_back(final_path);
  ++next_segment_;
  for (std::size_t i = 0; i < levels_.size(); ++i) recorded_chunks_[i] = std::max(recorded_chunks_[i], written[i]);
  uncommitted_.clear();
  uncommitted_bytes_ = 0;
  uncommitted_first_ = next_->rows();
  last_commit_ = now_seconds();
}

void CacheStore::abandon() {
  if (!next_) return;
  next_.reset();  // closes handles without checking: the file is not trusted as it is
  uncommitted_.clear();
  // Without a record, nothing refers to the file; with records, the next run recovers from it.
  if (records_.empty()) remove_quietly(next_path_);
}

ConsolidateStats CacheStore::consolidate(bool complete) {
  ConsolidateStats stats;
  const double started = now_seconds();
  if (!next_) {
    // Nothing new, yet the cache may be marked short by an interrupted run whose last crop had
    // been committed (a kill before the rename): it holds every crop now. Rewriting the attribute
    // in place could damage the file if we died midway, so the cache is copied, once.
    if (complete && main_exists_ && CacheFileReader(path_).complete() == false) {
      std::vector<std::unique_ptr<RowSource>> sources;
      auto cache = std::make_unique<CacheFileReader>(path_);
      const std::string same_rows = cache->content_id().value_or(new_content_id());
      sources.push_back(std::move(cache));
      stats = merge_into_cache(std::move(sources), /*complete=*/true, same_rows);
      stats.superseded_rows = 0;
      stats.bytes = std::int64_t(fs::file_size(path_));
      stats.seconds = now_seconds() - started;
    }
    return stats;
  }
  stats.superseded_rows = superseded_;
  // Rows not yet committed need no record: the rename below commits them with the rest (a
  // crash before it loses only them, as a crash before any commit would).
  const std::string content_id = new_content_id();
  next_->set_complete(complete);
  next_->set_content_id(content_id);
  next_->close();
  stats.rows = next_->rows();
  next_.reset();
  if (storage_.compression.kind == Compression::Kind::kNone && superseded_ == 0) {
    install_as_cache(next_path_);  // the common case: no byte is copied
  } else {
    std::vector<std::unique_ptr<RowSource>> sources;
    sources.push_back(std::make_unique<CacheFileReader>(next_path_));
    const ConsolidateStats merged = merge_into_cache(std::move(sources), complete, content_id);
    stats.rows = merged.rows;
    stats.copied_rows = merged.copied_rows;
  }
  stats.bytes = std::int64_t(fs::file_size(path_));
  stats.seconds = now_seconds() - started;
  return stats;
}

ConsolidateStats CacheStore::merge_into_cache(std::vector<std::unique_ptr<RowSource>> sources, bool complete,
                                              const std::string& content_id) {
  ConsolidateStats stats;
  // The newest row of each key wins: a recomputed (stale-pixel) crop replaces the old row.
  std::vector<std::vector<char>> keep(sources.size());
  std::unordered_map<std::string, std::pair<std::size_t, std::size_t>> newest;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    const CacheIndex index = sources[s]->read_index();
    keep[s].assign(index.windows.size(), 1);
    for (std::size_t row = 0; row < index.windows.size(); ++row) {
      auto [it, inserted] = newest.try_emplace(key_of(index, row), s, row);
      if (!inserted) {
        keep[it->second.first][it->second.second] = 0;
        it->second = {s, row};
        ++stats.superseded_rows;
      }
    }
  }
  const std::string tmp = path_ + ".tmp";
  try {
    std::int64_t total_rows = 0;
    for (const auto& k : keep) total_rows += std::count(k.begin(), k.end(), char(1));
    CacheFileWriter writer(tmp, wanted_, levels_, labels_, storage_, total_rows);
    for (std::size_t s = 0; s < sources.size(); ++s) {
      const std::int64_t block = rows_per_block(*sources[s]);
      const std::int64_t n = sources[s]->rows();
      std::int64_t row = 0;
      while (row < n) {
        if (!keep[s][std::size_t(row)]) {
          ++row;
          continue;
        }
        std::int64_t end = row;
        while (end < n && end - row < block && keep[s][std::size_t(end)]) ++end;
        writer.append(sources[s]->read_rows(row, end - row));
        row = end;
      }
    }
    stats.rows = writer.rows();
    stats.copied_rows = writer.rows();
    writer.set_complete(complete);
    writer.set_content_id(content_id);
    writer.close();
    sources.clear();
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  try {
    install_as_cache(tmp);
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  return stats;
}

void CacheStore::install_as_cache(const std::string& file) {
  // rename() is the commit: before it the old cache is intact, after it the new one is complete.
  if (policy_.fsync) sync_path(file);
  if (::rename(file.c_str(), path_.c_str()) != 0) {
    throw IoError("cannot rename " + file + " to " + path_ + ": " + errno_text());
  }
  if (policy_.fsync) sync_path(fs::absolute(path_).parent_path().string());
  main_exists_ = true;
  remove_run_files();
}

void CacheStore::remove_run_files() {
  // The cache now holds every committed row. Records go first: records without next.h5 are
  // known to be installed, next.h5 without records is known to be uncommitted.
  for (const auto& record : records_) remove_quietly(record);
  records_.clear();
  remove_quietly(next_path_);
  std::error_code ec;
  fs::remove(segments_dir_, ec);
}

}  // namespace embcache
