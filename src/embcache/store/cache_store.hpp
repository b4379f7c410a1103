// The cache's commit protocol: one writer at a time, work committed in segment files renamed
// into place, and consolidation into the single cache file by atomic rename. A SIGKILL at any
// moment leaves the last consolidated cache and every committed segment intact.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/cache_file_writer.hpp"
#include "embcache/store/cache_schema.hpp"

namespace embcache {

struct CommitPolicy {
  std::int64_t segment_bytes = std::int64_t(1) << 30;    // commit when a segment holds this much
  double segment_seconds = 30.0;                         // ... or is this old
  bool fsync = true;                                     // survive power loss, not only SIGKILL
};

struct ConsolidateStats {
  std::int64_t rows = 0;
  std::int64_t superseded_rows = 0;  // stale rows replaced by recomputed ones
  std::int64_t bytes = 0;            // size of the new cache file
  double seconds = 0.0;
};

class CacheStore {
 public:
  // Takes the writer lock (IoError if another process holds it), removes what crashed runs left
  // half-written, refuses an existing cache whose signature differs from `wanted` (InputError
  // naming the fields), and reads the keys of every committed row.
  CacheStore(std::string path, Signature wanted, LabelKinds labels, StorageOptions storage,
             CommitPolicy policy, bool overwrite);
  ~CacheStore();
  CacheStore(const CacheStore&) = delete;
  CacheStore& operator=(const CacheStore&) = delete;

  // Committed rows: map_key -> pixel hash, the newest commit winning.
  const std::unordered_map<std::string, std::uint64_t>& committed() const { return committed_; }
  const StorageOptions& storage() const { return storage_; }
  bool cache_exists() const { return main_exists_; }

  // The levels this run writes; InputError when they differ from those already committed.
  void set_levels(std::vector<LevelSpec> levels);
  // Appends to the open segment (opening one if needed) and commits it when the policy says.
  void append(const RowBatch& batch);
  // Closes, syncs and renames the open segment into place. No-op without an open segment.
  void commit();
  // Drops the open segment (after an error in its own file).
  void discard_open_segment();
  // Merges the cache and all committed segments into a new cache file, renamed over the old one.
  ConsolidateStats consolidate();

 private:
  class WriterLock;
  void read_committed(const CacheFileReader& reader);
  // The levels written from now on; also recorded in the signature's "levels".
  void adopt_levels(std::vector<LevelSpec> levels);
  std::string segment_path(std::int64_t number) const;
  // Syncs `file`, renames it over the cache and drops the (now redundant) segments.
  void install_as_cache(const std::string& file);

  std::string path_;
  std::string segments_dir_;
  Signature wanted_;
  LabelKinds labels_;
  StorageOptions storage_;
  CommitPolicy policy_;
  std::unique_ptr<WriterLock> lock_;
  bool main_exists_ = false;
  std::vector<std::string> segments_;  // committed, oldest first
  std::int64_t next_segment_ = 1;
  std::unordered_map<std::string, std::uint64_t> committed_;
  std::vector<LevelSpec> existing_levels_;
  std::vector<LevelSpec> levels_;
  std::unique_ptr<CacheFileWriter> open_segment_;
  double open_segment_started_ = 0.0;
  std::int64_t writeback_mark_ = 0;  // feature bytes of the open segment at the last writeback
};

// Makes `path`'s content durable (fsync of a file or directory).
void sync_path(const std::string& path);

}  // namespace embcache
