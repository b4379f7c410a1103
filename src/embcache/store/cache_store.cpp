#include "embcache/store/cache_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "embcache/core/crop_key.hpp"
#include "embcache/core/error.hpp"
#include "embcache/store/cache_file_reader.hpp"

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
constexpr std::int64_t kRenameSegmentBytes = std::int64_t(64) << 20;
constexpr std::int64_t kWritebackBytes = std::int64_t(32) << 20;

std::string key_of(const CacheIndex& index, std::size_t row) {
  CropKey key{index.groups[row], index.windows[row],
              {index.bounds[4 * row], index.bounds[4 * row + 1], index.bounds[4 * row + 2],
               index.bounds[4 * row + 3]}};
  return key.map_key();
}

void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
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

// An flock on CACHE.lock held for the store's lifetime. The kernel drops it when the process
// dies, so a crashed writer never blocks the next run.
class CacheStore::WriterLock {
 public:
  explicit WriterLock(std::string path) : path_(std::move(path)) {
    for (int attempt = 0; attempt < 10; ++attempt) {
      fd_ = ::open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
      if (fd_ < 0) {
        throw IoError("cannot create " + path_ + ": " + errno_text() +
                      "; the cache's directory must be writable (choose another --out)");
      }
      if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        ::close(fd_);
        throw IoError("the cache is being written by another embcache process (it holds " + path_ +
                      "); wait for it to finish");
      }
      // The previous holder may have unlinked the file between our open and flock.
      struct stat held {}, named {};
      if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 &&
          held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
        const std::string pid = std::to_string(::getpid()) + "\n";
        if (::ftruncate(fd_, 0) == 0 && ::write(fd_, pid.data(), pid.size()) < 0) {
          // The pid is informational only.
        }
        return;
      }
      ::close(fd_);
    }
    throw IoError("cannot take the writer lock " + path_ + "; another process keeps replacing it");
  }
  ~WriterLock() {
    ::unlink(path_.c_str());
    ::close(fd_);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

CacheStore::CacheStore(std::string path, Signature wanted, LabelKinds labels,
                       StorageOptions storage, CommitPolicy policy, bool overwrite)
    : path_(std::move(path)),
      segments_dir_(path_ + ".segments"),
      wanted_(std::move(wanted)),
      labels_(labels),
      storage_(storage),
      policy_(policy) {
  const fs::path parent = fs::absolute(path_).parent_path();
  if (!fs::is_directory(parent)) {
    throw IoError(path_ + ": directory " + parent.string() + " does not exist; create it first");
  }
  if (fs::is_directory(path_)) throw IoError(path_ + ": is a directory; --out must name a file");
  lock_ = std::make_unique<WriterLock>(path_ + ".lock");

  // Leftovers of a crashed run are never trusted: a half-written consolidation or segment.
  remove_quietly(path_ + ".tmp");
  if (overwrite) {
    // --overwrite replaces caches only: a typo must never delete a dataset or other file.
    if (fs::exists(path_)) CacheFileReader check(path_);
    std::error_code ec;
    fs::remove_all(segments_dir_, ec);
    if (fs::exists(path_)) {
      if (!fs::remove(path_, ec)) throw IoError("cannot remove " + path_ + ": " + ec.message());
    }
  }

  main_exists_ = fs::exists(path_);
  if (main_exists_) {
    CacheFileReader reader(path_);
    const auto differences = signature_differences(reader.signature(), wanted_);
    if (!differences.empty()) {
      std::string fields;
      for (const auto& f : differences) fields += (fields.empty() ? "" : ", ") + f;
      throw InputError(path_ + ": this cache was made with a different " + fields +
                       "; use another --out, or --overwrite to rebuild it");
    }
    storage_.compression = reader.storage().compression;  // a cache keeps its compression
    existing_levels_ = reader.levels();
    read_committed(reader);
  }

  if (fs::is_directory(segments_dir_)) {
    std::vector<std::pair<std::int64_t, std::string>> found;
    for (const auto& entry : fs::directory_iterator(segments_dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.size() > std::strlen(kPartialSuffix) &&
          name.compare(name.size() - std::strlen(kPartialSuffix), std::string::npos, kPartialSuffix) == 0) {
        remove_quietly(entry.path().string());  // never renamed: not committed
        continue;
      }
      if (name.rfind(kSegmentPrefix, 0) != 0) continue;
      const std::int64_t number = std::atoll(name.c_str() + std::strlen(kSegmentPrefix));
      found.emplace_back(number, entry.path().string());
    }
    std::sort(found.begin(), found.end());
    for (const auto& [number, file] : found) {
      CacheFileReader reader(file);
      const auto differences = signature_differences(reader.signature(), wanted_);
      if (!differences.empty()) {
        throw InputError(path_ + ": uncommitted work in " + segments_dir_ +
                         " was made with a different " + differences.front() +
                         "; rerun with the original options to finish it, or --overwrite");
      }
      if (existing_levels_.empty()) existing_levels_ = reader.levels();
      read_committed(reader);
      segments_.push_back(file);
      next_segment_ = std::max(next_segment_, number + 1);
    }
  }
  if (!existing_levels_.empty()) adopt_levels(existing_levels_);
}

void CacheStore::adopt_levels(std::vector<LevelSpec> levels) {
  nlohmann::json names = nlohmann::json::array();
  for (const auto& level : levels) names.push_back(level.name);
  wanted_["levels"] = names;
  levels_ = std::move(levels);
}

CacheStore::~CacheStore() {
  discard_open_segment();
  std::error_code ec;
  if (fs::is_directory(segments_dir_, ec) && fs::is_empty(segments_dir_, ec)) fs::remove(segments_dir_, ec);
}

void CacheStore::read_committed(const CacheFileReader& reader) {
  const CacheIndex index = reader.read_index();
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

void CacheStore::append(const RowBatch& batch) {
  if (!open_segment_) {
    std::error_code ec;
    fs::create_directories(segments_dir_, ec);
    if (ec) throw IoError("cannot create " + segments_dir_ + ": " + ec.message());
    // Segments are written uncompressed: compression is paid once, at consolidation.
    StorageOptions segment_storage = storage_;
    segment_storage.compression = Compression{};
    open_segment_ = std::make_unique<CacheFileWriter>(segment_path(next_segment_) + kPartialSuffix,
                                                      wanted_, levels_, labels_, segment_storage);
    open_segment_started_ = now_seconds();
    writeback_mark_ = 0;
  }
  open_segment_->append(batch);
  if (policy_.fsync && open_segment_->feature_bytes() - writeback_mark_ >= kWritebackBytes) {
    open_segment_->start_writeback();
    writeback_mark_ = open_segment_->feature_bytes();
  }
  if (open_segment_->feature_bytes() >= policy_.segment_bytes ||
      now_seconds() - open_segment_started_ >= policy_.segment_seconds) {
    commit();
  }
}

void CacheStore::commit() {
  if (!open_segment_) return;
  const std::string partial = open_segment_->path();
  const std::string final_path = segment_path(next_segment_);
  open_segment_->close();
  open_segment_.reset();
  if (policy_.fsync) sync_path(partial);
  if (::rename(partial.c_str(), final_path.c_str()) != 0) {
    throw IoError("cannot rename " + partial + " to " + final_path + ": " + errno_text());
  }
  if (policy_.fsync) sync_path(segments_dir_);
  segments_.push_back(final_path);
  ++next_segment_;
}

void CacheStore::discard_open_segment() {
  if (!open_segment_) return;
  const std::string partial = open_segment_->path();
  open_segment_.reset();  // closes handles without checking: the file is being thrown away
  remove_quietly(partial);
}

ConsolidateStats CacheStore::consolidate() {
  ConsolidateStats stats;
  if (segments_.empty()) return stats;
  const double started = now_seconds();

  // The common first run: one committed segment and nothing else. Segments are complete cache
  // files, so when it needs no recompression (and is big enough that its chunks are not mostly
  // padding) it becomes the cache by rename, without copying a byte.
  if (!main_exists_ && segments_.size() == 1 && storage_.compression.kind == Compression::Kind::kNone &&
      std::int64_t(fs::file_size(segments_.front())) >= kRenameSegmentBytes) {
    install_as_cache(segments_.front());
    stats.rows = CacheFileReader(path_).rows();
    stats.bytes = std::int64_t(fs::file_size(path_));
    stats.seconds = now_seconds() - started;
    return stats;
  }

  std::vector<std::string> sources;
  if (main_exists_) sources.push_back(path_);
  sources.insert(sources.end(), segments_.begin(), segments_.end());

  // The newest row of each key wins: a recomputed (stale-pixel) crop replaces the old row.
  std::vector<std::unique_ptr<CacheFileReader>> readers;
  std::vector<std::vector<char>> keep(sources.size());
  std::unordered_map<std::string, std::pair<std::size_t, std::size_t>> newest;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    readers.push_back(std::make_unique<CacheFileReader>(sources[s]));
    const CacheIndex index = readers[s]->read_index();
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
  if (levels_.empty()) adopt_levels(readers.back()->levels());
  const std::vector<LevelSpec> levels = levels_;

  const std::string tmp = path_ + ".tmp";
  try {
    std::int64_t total_rows = 0;
    for (const auto& k : keep) total_rows += std::count(k.begin(), k.end(), char(1));
    CacheFileWriter writer(tmp, wanted_, levels, labels_, storage_, total_rows);
    for (std::size_t s = 0; s < sources.size(); ++s) {
      const std::int64_t row_bytes = std::max<std::int64_t>(readers[s]->row_feature_bytes(), 1);
      const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t(64) << 20) / row_bytes);
      const std::int64_t n = readers[s]->rows();
      std::int64_t row = 0;
      while (row < n) {
        if (!keep[s][std::size_t(row)]) {
          ++row;
          continue;
        }
        std::int64_t end = row;
        while (end < n && end - row < block && keep[s][std::size_t(end)]) ++end;
        writer.append(readers[s]->read_rows(row, end - row));
        row = end;
      }
    }
    stats.rows = writer.rows();
    writer.close();
    readers.clear();
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
  stats.bytes = std::int64_t(fs::file_size(path_));
  stats.seconds = now_seconds() - started;
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
  // The cache now holds every committed row; the segments are redundant.
  for (const auto& segment : segments_) remove_quietly(segment);
  segments_.clear();
  std::error_code ec;
  fs::remove(segments_dir_, ec);
}

}  // namespace embcache
