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
#include <thread>

#include "embcache/core/crop_key.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/core/file_lock.hpp"
#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/commit_record.hpp"

namespace fs = std::filesystem;

namespace embcache {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string errno_text() { return std::strerror(errno); }

constexpr const char* kSegmentPrefix = "seg-";
constexpr const char* kSegmentSuffix = ".h5";
constexpr const char* kPartialSuffix = ".partial";
constexpr const char* kNextFile = "next.h5";
constexpr const char* kRecoveredFile = "recovered.h5";
constexpr const char* kPartFile = "part.h5";
constexpr const char* kOwnerLock = "owner.lock";
constexpr std::int64_t kWritebackBytes = std::int64_t(32) << 20;

std::string key_of(const CacheIndex& index, std::size_t row) {
  CropKey key{index.groups[row], index.windows[row],
              {index.bounds[4 * row], index.bounds[4 * row + 1], index.bounds[4 * row + 2],
               index.bounds[4 * row + 3]}};
  return key.map_key();
}

// "0/1" -> "all", "2/4" -> "shard-2-of-4": a run folder's name.
std::string run_folder_name(const std::string& shard) {
  if (shard == "0/1") return "all";
  const auto slash = shard.find('/');
  return "shard-" + shard.substr(0, slash) + "-of-" + shard.substr(slash + 1);
}

// The inverse, for listings; "" for a name that is not a run folder.
std::string shard_of_folder(const std::string& name) {
  if (name == "all") return "0/1";
  const auto of = name.find("-of-");
  if (name.rfind("shard-", 0) != 0 || of == std::string::npos) return "";
  return name.substr(6, of - 6) + "/" + name.substr(of + 4);
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

// A shard whose run ends with nothing left in its folder removes CACHE.runs when it is empty
// (~CacheStore). If that falls between our creating CACHE.runs and our folder inside it, the
// folder's mkdir finds no parent; if it falls between another shard's creating CACHE.runs and
// our check that it is there, create_directories reports "File exists". Either way, create
// both again, after a pause that grows, so that stores opened and closed in step (a test's
// loop) fall out of step. A plain file in the way still fails every time.
std::error_code create_run_dir(const std::string& dir) {
  std::error_code ec;
  for (int attempt = 0; attempt < 32; ++attempt) {
    ec.clear();
    fs::create_directories(dir, ec);
    if (ec != std::errc::no_such_file_or_directory && ec != std::errc::file_exists) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50 * attempt));
  }
  return ec;
}

}  // namespace

std::string run_dir_of(const std::string& cache_path, const std::string& shard) {
  return cache_path + ".runs/" + run_folder_name(shard);
}

// make_optional: as C++20 (LibTorch 2.13 and later), a json converts to optional<json> two ways.
std::optional<Signature> signature_of_existing_rows(const std::string& cache_path, const std::string& shard) {
  if (fs::exists(cache_path)) {
    refuse_non_cache(cache_path);
    return std::make_optional(CacheReader(cache_path, CacheReader::MissingParts::kSkip).signature());
  }
  std::vector<std::string> dirs{run_dir_of(cache_path, shard)};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache_path + ".runs", ec)) dirs.push_back(entry.path().string());
  dirs.push_back(cache_path + ".segments");
  for (const auto& dir : dirs) {
    const std::vector<std::string> records = commit_records_in(dir, /*remove_partial=*/false);
    if (!records.empty()) return std::make_optional(CacheFileReader(records.front()).signature());
  }
  return std::nullopt;
}

std::vector<RunState> run_states(const std::string& cache_path) {
  std::vector<RunState> states;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache_path + ".runs", ec)) {
    const std::string shard = shard_of_folder(entry.path().filename().string());
    if (shard.empty() || !entry.is_directory(ec)) continue;
    const std::string dir = entry.path().string();
    states.push_back({shard, file_lock_is_held(dir + "/" + kOwnerLock),
                      std::int64_t(commit_records_in(dir, /*remove_partial=*/false).size())});
  }
  const std::string legacy = cache_path + ".segments";
  if (fs::is_directory(legacy, ec)) {
    states.push_back({"legacy", file_lock_is_held(cache_path + ".lock"),
                      std::int64_t(commit_records_in(legacy, /*remove_partial=*/false).size())});
  }
  std::sort(states.begin(), states.end(), [](const RunState& a, const RunState& b) { return a.shard < b.shard; });
  return states;
}

std::int64_t pending_commit_records(const std::string& cache_path) {
  std::int64_t records = 0;
  for (const RunState& run : run_states(cache_path)) records += run.records;
  return records;
}

std::string cache_shortfall(const CacheReader& cache) {
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

std::int64_t cache_bytes(const CacheReader& cache) {
  std::error_code ec;
  std::int64_t bytes = std::int64_t(fs::file_size(cache.path(), ec));
  if (cache.is_view()) {
    for (std::size_t p = 0; p < cache.parts().parts.size(); ++p) {
      const auto size = fs::file_size(cache.part_path(p), ec);
      if (!ec) bytes += std::int64_t(size);
    }
  }
  return bytes;
}

CacheStore::CacheStore(std::string path, Signature wanted, LabelKinds labels,
                       StorageOptions storage, CommitPolicy policy, bool overwrite, std::string shard)
    : path_(std::move(path)),
      shard_(std::move(shard)),
      segments_dir_(run_dir_of(path_, shard_)),
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
  if (fs::exists(path_)) refuse_non_cache(path_);  // before anything is created beside it
  const std::error_code ec = create_run_dir(segments_dir_);
  if (ec) throw IoError("cannot create " + segments_dir_ + ": " + ec.message() + "; the cache's directory must be writable (choose another --out)");
  const std::string who = shard_ == "0/1" ? "the cache" : "shard " + shard_ + " of the cache";
  lock_ = std::make_unique<FileLock>(segments_dir_ + "/" + kOwnerLock,
                                     who + " is being written by another embcache process; wait for it to finish",
                                     "the cache's directory must be writable (choose another --out)");

  // Leftovers of a crashed run are never trusted: a half-written copy or commit record.
  remove_quietly(segments_dir_ + "/" + kRecoveredFile);
  remove_quietly(segments_dir_ + "/" + kPartFile);
  if (overwrite) {
    if (fs::exists(path_)) refuse_non_cache(path_);
    for (const auto& record : commit_records_in(segments_dir_, true)) remove_quietly(record);
    remove_quietly(next_path_);
    remove_cache(path_);
  }
  check_existing();
  // This shard's interrupted run, and an older build's (which held CACHE.h5.lock for its whole run).
  recover(segments_dir_, /*remove_dir=*/false);
  if (fs::is_directory(path_ + ".segments") && !file_lock_is_held(path_ + ".lock")) recover(path_ + ".segments", true);
  if (main_exists_) {
    const CacheReader reader(path_, CacheReader::MissingParts::kSkip);
    read_committed(reader);
    if (existing_levels_.empty()) existing_levels_ = reader.levels();
  }
  if (!existing_levels_.empty()) adopt_levels(existing_levels_);
}

void CacheStore::check_existing() {
  main_exists_ = fs::exists(path_);
  if (!main_exists_) return;
  refuse_non_cache(path_);
  const CacheReader reader(path_, CacheReader::MissingParts::kSkip);
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
  if (const std::string why = amp_conflict(reader, wanted_); !why.empty()) throw InputError(why);
  storage_.compression = reader.storage().compression;  // a cache keeps its compression
  existing_levels_ = reader.levels();
}

void CacheStore::recover(const std::string& dir, bool remove_dir) {
  const std::vector<std::string> records = commit_records_in(dir, /*remove_partial=*/true);
  const std::string next = dir + "/" + kNextFile;
  if (records.empty() || !fs::exists(next)) {
    // Without records nothing in next.h5 was committed. Records without next.h5 belong to a run
    // that installed it and died before removing them: their rows are in the cache.
    for (const auto& record : records) remove_quietly(record);
    remove_quietly(next);
    std::error_code ec;
    if (remove_dir) fs::remove_all(dir, ec);
    return;
  }
  auto chunks = std::make_shared<RecordedChunks>(next);
  std::vector<std::unique_ptr<RowSource>> sources;
  std::int64_t rows = 0;
  for (const auto& file : records) {
    auto record = std::make_unique<CommittedRows>(file, chunks);
    const auto differences = signature_differences(record->signature(), wanted_);
    if (!differences.empty()) {
      throw InputError(path_ + ": uncommitted work in " + dir + " was made with a different " +
                       differences.front() + "; rerun with the original options to finish it, or --overwrite");
    }
    if (existing_levels_.empty()) existing_levels_ = record->levels();
    rows += record->rows();
    sources.push_back(std::move(record));
  }
  if (!existing_levels_.empty()) adopt_levels(existing_levels_);
  // The records' rows, copied into one file with the cache's storage: the part they become. A
  // key committed twice (an older build's records repeat the cache's rows) keeps its newest row.
  const std::string recovered = segments_dir_ + "/" + kRecoveredFile;
  try {
    CacheFileWriter writer(recovered, wanted_, levels_, labels_, storage_, rows);
    std::unordered_map<std::string, std::pair<std::size_t, std::size_t>> newest;
    std::vector<CacheIndex> indices;
    for (std::size_t s = 0; s < sources.size(); ++s) {
      indices.push_back(sources[s]->read_index());
      for (std::size_t row = 0; row < indices[s].windows.size(); ++row) newest[key_of(indices[s], row)] = {s, row};
    }
    for (std::size_t s = 0; s < sources.size(); ++s) {
      const std::int64_t n = sources[s]->rows();
      std::int64_t row = 0;
      while (row < n) {
        auto keep = [&](std::int64_t r) { return newest[key_of(indices[s], std::size_t(r))] == std::make_pair(s, std::size_t(r)); };
        if (!keep(row)) {
          ++row;
          continue;
        }
        std::int64_t end = row;
        while (end < n && end - row < 4096 && keep(end)) ++end;
        writer.append(sources[s]->read_rows(row, end - row));
        row = end;
      }
    }
    writer.set_complete(false);  // the run that made them was cut short
    writer.set_content_id(new_content_id());
    writer.close();
    sources.clear();
    chunks.reset();
  } catch (...) {
    remove_quietly(recovered);
    throw;
  }
  install_part(path_, recovered, policy_.fsync);
  main_exists_ = true;
  remove_quietly(recovered);  // renamed to the cache, or linked into its parts: this name is no longer needed
  for (const auto& record : records) remove_quietly(record);
  remove_quietly(next);
  std::error_code ec;
  if (remove_dir) fs::remove_all(dir, ec);
  recovered_rows_ += rows;
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
  if (records_.empty() && !fs::exists(next_path_, ec)) {
    lock_.reset();  // removes owner.lock
    fs::remove(segments_dir_, ec);  // only when empty
    fs::remove(path_ + ".runs", ec);
  }
}

void CacheStore::read_committed(const CacheReader& source) {
  const CacheIndex index = source.read_index();
  std::unordered_map<std::string, std::uint32_t> split_of;  // a split name -> its committed_splits_ index
  for (std::uint32_t s = 0; s < committed_splits_.size(); ++s) split_of[committed_splits_[s]] = s;
  for (std::size_t row = 0; row < index.windows.size(); ++row) {
    const auto [it, fresh] = split_of.try_emplace(index.splits[row], std::uint32_t(committed_splits_.size()));
    if (fresh) committed_splits_.push_back(index.splits[row]);
    committed_[key_of(index, row)] = CommittedRow{index.pixel_hashes[row], it->second};
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
  const std::error_code ec = create_run_dir(segments_dir_);
  if (ec) throw IoError("cannot create " + segments_dir_ + ": " + ec.message());
  // Only this run's rows: the cache's rows stay where they are. Built uncompressed: its chunks
  // are written whole by us, and committed chunks are never rewritten. A compressed cache's part
  // is compressed once, by a copy of this run's rows at the end.
  next_ = std::make_unique<CacheFileWriter>(next_path_, wanted_, levels_, labels_, building_storage(), expected_rows_);
  uncommitted_first_ = 0;
  uncommitted_.clear();
  uncommitted_bytes_ = 0;
  recorded_chunks_.assign(levels_.size(), 0);
  last_commit_ = now_seconds();
  writeback_mark_ = 0;
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
  // The record is in place, so this run's state says so before the folder is synced: if that
  // sync fails, abandon() keeps the file the record points at and the next run recovers its rows.
  records_.push_back(final_path);
  ++next_segment_;
  for (std::size_t i = 0; i < levels_.size(); ++i) recorded_chunks_[i] = std::max(recorded_chunks_[i], written[i]);
  uncommitted_.clear();
  uncommitted_bytes_ = 0;
  uncommitted_first_ = next_->rows();
  last_commit_ = now_seconds();
  if (policy_.fsync) sync_path(segments_dir_);
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
    // Nothing new, yet the cache may be marked short by an interrupted run of this shard whose
    // last crop had been committed (a kill before the install): it holds every crop now.
    if (complete && main_exists_) stats.copied_rows = mark_shard_complete(path_, shard_, policy_.fsync);
  } else {
    stats.superseded_rows = superseded_;
    // Rows not yet committed need no record: the install commits them with the rest (a crash
    // before it loses only them, as a crash before any commit would).
    next_->set_complete(complete);
    next_->set_content_id(new_content_id());
    next_->close();
    next_.reset();
    std::string part = next_path_;
    if (storage_.compression.kind != Compression::Kind::kNone) {
      part = segments_dir_ + "/" + kPartFile;
      const CacheFileReader built(next_path_);
      try {
        stats.copied_rows = copy_rows_to_file(built, part, wanted_, levels_, labels_, storage_, complete,
                                              built.content_id().value_or(new_content_id()));
      } catch (...) {
        remove_quietly(part);
        throw;
      }
    }
    install(part);
  }
  if (fs::exists(path_)) {
    const CacheReader cache(path_, CacheReader::MissingParts::kSkip);
    stats.rows = cache.rows();
    stats.parts = cache.is_view() ? std::int64_t(cache.parts().parts.size()) : 0;
    stats.bytes = cache_bytes(cache);
  }
  stats.seconds = now_seconds() - started;
  return stats;
}

InstallStats CacheStore::install(const std::string& file) {
  const InstallStats installed = install_part(path_, file, policy_.fsync);
  main_exists_ = true;
  remove_run_files();
  return installed;
}

void CacheStore::remove_run_files() {
  // The cache now holds every committed row. Records go first: records without next.h5 are
  // known to be installed, next.h5 without records is known to be uncommitted.
  for (const auto& record : records_) remove_quietly(record);
  records_.clear();
  remove_quietly(next_path_);
  remove_quietly(segments_dir_ + "/" + kPartFile);
}

}  // namespace embcache
