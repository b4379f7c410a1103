// The cache's commit protocol: one writer per shard of a cache, any number of shards at once.
// A run builds its new rows, and only those, in its own folder (CACHE.h5.runs/SHARD/next.h5,
// locked by SHARD/owner.lock for the run's life); each commit fsyncs it and renames a small
// commit record into place (commit_record.hpp). At the end the file becomes a part of the cache
// (part_installer.hpp: CACHE.h5.lock is held for that install only). Features are written
// once and old rows are never copied. A SIGKILL at any moment leaves the last installed cache and
// every committed row recoverable: the next run of that shard installs them first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "embcache/core/error.hpp"
#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/cache_file_writer.hpp"
#include "embcache/store/cache_reader.hpp"
#include "embcache/store/cache_schema.hpp"
#include "embcache/store/part_installer.hpp"

namespace embcache {

class FileLock;

struct CommitPolicy {
  std::int64_t segment_bytes = std::int64_t(1) << 30;    // commit when a segment holds this much
  double segment_seconds = 30.0;                         // ... or is this old
  bool fsync = true;                                     // survive power loss, not only SIGKILL
  bool drop_behind = false;                              // evict written pages once on disk
};

// An existing cache made with another signature. The message gives precompute's advice
// (--out, --overwrite); `embcache run` words its own from `mismatch` and `note`.
class SignatureMismatch : public InputError {
 public:
  SignatureMismatch(const std::string& mismatch, const std::string& note)
      : InputError(mismatch + "; use another --out, or --overwrite to rebuild it" + note), mismatch(mismatch), note(note) {}
  std::string mismatch;  // "CACHE: this cache was made with a different FIELDS"
  std::string note;      // "" or " (a re-exported encoder is ...)"
};

struct ConsolidateStats {
  std::int64_t rows = 0;             // rows of the cache after the run
  std::int64_t superseded_rows = 0;  // stale rows replaced by recomputed ones (hidden in the view)
  std::int64_t copied_rows = 0;      // rows copied into another file (compressed caches: this run's rows)
  std::int64_t bytes = 0;            // bytes of the cache: the view and every part
  std::int64_t parts = 0;            // parts of the cache (0: one file)
  double seconds = 0.0;
};

// The folder of a run of `shard` ("I/N") into the cache: CACHE.h5.runs/all or shard-I-of-N.
std::string run_dir_of(const std::string& cache_path, const std::string& shard);
// Commit records of runs into the cache (CACHE.h5.runs/*, and CACHE.h5.segments of older
// builds): rows an interrupted run committed that CACHE is still without (the next run of that
// shard installs them), or runs at work.
std::int64_t pending_commit_records(const std::string& cache_path);
// The signature of the rows the cache already has: the cache's, else that of the commit records
// of an interrupted or running run (this shard's first); nullopt when there are none.
std::optional<Signature> signature_of_existing_rows(const std::string& cache_path, const std::string& shard);
// Runs into the cache: per shard folder, whether a live process holds it and its commit records.
struct RunState {
  std::string shard;  // "0/1", "2/4", or "legacy" (CACHE.h5.segments of an older build)
  bool active = false;
  std::int64_t records = 0;
};
std::vector<RunState> run_states(const std::string& cache_path);
// What a reader of `cache` should be told when an interrupted precompute left it short (rows
// missing, or committed rows not yet installed), or "" when nothing is known to be missing.
std::string cache_shortfall(const CacheReader& cache);
// Bytes of the cache on disk: the file, and for a view every part it names.
std::int64_t cache_bytes(const CacheReader& cache);

class CacheStore {
 public:
  // Takes the lock of `shard`'s run folder (IoError if another process holds it), removes what
  // crashed runs left half-written, refuses an existing cache whose signature differs from
  // `wanted` (InputError naming the fields), installs the committed rows of an interrupted run
  // of this shard (a copy, the only one a crash costs), and reads the keys of every committed row.
  CacheStore(std::string path, Signature wanted, LabelKinds labels, StorageOptions storage,
             CommitPolicy policy, bool overwrite, std::string shard = "0/1");
  ~CacheStore();
  CacheStore(const CacheStore&) = delete;
  CacheStore& operator=(const CacheStore&) = delete;

  // What a committed row is judged stale by: its content hash (pixels and labels) and its split
  // (an index into committed_splits()). A crop whose hash or split differs is computed again,
  // and its new row hides the old one.
  struct CommittedRow {
    std::uint64_t content_hash = 0;
    std::uint32_t split = 0;
  };
  // Committed rows by map_key, the newest commit winning.
  const std::unordered_map<std::string, CommittedRow>& committed() const { return committed_; }
  const std::vector<std::string>& committed_splits() const { return committed_splits_; }
  const StorageOptions& storage() const { return storage_; }
  bool cache_exists() const { return main_exists_; }
  // Rows an interrupted run had committed, installed by the constructor.
  std::int64_t recovered_rows() const { return recovered_rows_; }
  // The storage of the file a run builds: the cache's, uncompressed (a compressed cache is
  // compressed once, by the copy at the end). Rows for it need checksums when it has them.
  StorageOptions building_storage() const;
  // Chunks of this run's rows whose checksum the writing thread computed (their rows came
  // without row checksums); recovered or old rows copied into the new file are not counted.
  std::int64_t chunks_checksummed_while_writing() const { return checksummed_while_writing_; }
  // An upper bound of the rows this run appends: small caches get chunks no larger than needed.
  void expect_rows(std::int64_t rows) { expected_rows_ = rows; }

  // The levels this run writes; InputError when they differ from those already committed.
  void set_levels(std::vector<LevelSpec> levels);
  // Appends to the file being built (starting it, with the old cache's rows, if needed) and
  // commits when the policy says. `between_chunks`: see CacheFileWriter::append.
  void append(const RowBatch& batch, const std::function<void()>& between_chunks = {});
  // Makes every appended row durable: fsyncs the file being built and renames a commit record
  // into place. No-op when nothing is uncommitted.
  void commit();
  // Stops building (after an error): what was committed stays for the next run to recover.
  void abandon();
  // Closes the file being built and installs it as a part of the cache (the cache itself when
  // there was none): by rename, or by a copy of this run's rows when the cache is compressed.
  // `complete`: the run finished every crop of its shard (false after Ctrl-C), recorded for readers.
  ConsolidateStats consolidate(bool complete);

 private:
  void read_committed(const CacheReader& source);
  // The existing cache, if any: its signature checked against wanted_, its levels and compression taken.
  void check_existing();
  // The levels written from now on; also recorded in the signature's "levels".
  void adopt_levels(std::vector<LevelSpec> levels);
  std::string segment_path(std::int64_t number) const;
  // Installs the rows an interrupted run committed in `dir` (this shard's folder, or an older
  // build's CACHE.h5.segments) as a part; removes what is left of it.
  void recover(const std::string& dir, bool remove_dir);
  void start_building();
  // Installs `file` (a closed cache file of this run's rows) and removes the run's records.
  InstallStats install(const std::string& file);
  void remove_run_files();

  std::string path_;
  std::string shard_;
  std::string segments_dir_;            // this run's folder (CACHE.h5.runs/SHARD)
  Signature wanted_;
  LabelKinds labels_;
  StorageOptions storage_;
  CommitPolicy policy_;
  std::unique_ptr<FileLock> lock_;     // of segments_dir_
  bool main_exists_ = false;
  std::string next_path_;               // the cache file being built
  std::vector<std::string> records_;     // this run's commit records, oldest first
  std::int64_t next_segment_ = 1;
  std::unordered_map<std::string, CommittedRow> committed_;
  std::vector<std::string> committed_splits_;  // the split names committed rows have
  std::vector<LevelSpec> existing_levels_;
  std::vector<LevelSpec> levels_;
  std::unique_ptr<CacheFileWriter> next_;
  std::vector<RowBatch> uncommitted_;    // index and labels of rows appended since the last commit
  std::int64_t uncommitted_first_ = 0;   // the first of them, as a row of next_
  std::int64_t uncommitted_bytes_ = 0;   // their feature bytes
  std::vector<std::int64_t> recorded_chunks_;  // per level: chunks [0, n) are in records
  double last_commit_ = 0.0;
  std::int64_t superseded_ = 0;          // appended rows whose key an older row has
  std::int64_t expected_rows_ = 0;
  std::int64_t recovered_rows_ = 0;
  std::int64_t writeback_mark_ = 0;
  std::int64_t checksummed_while_writing_ = 0;  // chunks_checksummed_here() of next_ for this run's rows      // feature bytes of next_ at the last writeback
};

}  // namespace embcache
