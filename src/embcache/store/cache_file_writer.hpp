// Writes one complete cache file (format 1 or 2, the lowest that describes it) by appending row batches; used for both segment
// files and the consolidated cache. The file is only trustworthy after close() returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "embcache/store/background_writeback.hpp"
#include "embcache/store/cache_schema.hpp"
#include "embcache/store/file_space.hpp"
#include "embcache/h5/h5.hpp"
#include "embcache/store/row_batch.hpp"

namespace embcache {

class CacheFileWriter {
 public:
  // `expected_rows` (when known) caps rows per chunk, so a small cache is not padded to whole
  // 1 MiB chunks.
  CacheFileWriter(std::string path, const Signature& signature, std::vector<LevelSpec> levels,
                  const LabelKinds& labels, const StorageOptions& storage,
                  std::int64_t expected_rows = 0);
  CacheFileWriter(const CacheFileWriter&) = delete;
  CacheFileWriter& operator=(const CacheFileWriter&) = delete;

  // `between_chunks`, when set, runs after each feature chunk written: the one thread that may
  // call HDF5 can serve other work (reading the next windows) in the middle of a large batch. It
  // must not throw, and must not touch this file.
  // Full chunks inside a batch are written from the batch's own level tensors, without a copy:
  // the 4 bytes after such a chunk are borrowed for its checksum during the write and restored.
  // No other thread may read the batch's level tensors during append.
  void append(const RowBatch& batch, const std::function<void()>& between_chunks = {});
  // Records whether the run that wrote this file finished every crop it was asked for (root
  // attribute `complete`, 1 or 0); readers warn about a cache an interrupted run left short.
  void set_complete(bool complete);
  // Names the rows this file holds (root attribute `content_id`): a new random id whenever the
  // rows change, so a study can tell that probes were trained on an earlier content.
  void set_content_id(const std::string& id);
  // Flushes and closes; throws on failure (the file must then be discarded).
  void close();
  // Asks the kernel to start writing the file's dirty pages now, without waiting, so that the
  // fsync at commit finds little left to do. A helper thread submits them: the calling thread
  // only notes the range. Best effort: errors are ignored here and surface at close and fsync.
  // `drop`: the range also leaves the page cache once on disk (BackgroundWriteback::request).
  void start_writeback(bool drop = false);
  std::int64_t rows() const { return rows_; }

  // What a commit record needs (cache_store.hpp): where the finished rows' features lie in this
  // file, so that they can be recovered from it without trusting its HDF5 structures.
  // Pushes everything appended so far to the file (HDF5's caches included).
  void flush();
  // Rows per chunk, the same for every level: chunk k of a level holds rows [k*R, (k+1)*R).
  std::int64_t chunk_rows() const { return std::int64_t(chunk_rows_); }
  // True where a level's chunks hold whole rows, written by us in full; only such chunks are
  // referenced by commit records, and never rewritten once written.
  bool whole_chunks(std::size_t level) const { return direct_[level].enabled; }
  // Chunks of a whole-chunk level written so far: chunks [0, written_chunks) are final.
  std::int64_t written_chunks(std::size_t level) const;
  struct ChunkLocation {
    std::uint64_t address = 0;  // byte offset in the file
    std::uint64_t size = 0;     // stored bytes (the rows, then 4 checksum bytes)
  };
  ChunkLocation chunk_location(std::size_t level, std::int64_t chunk) const;
  // The stored bytes of rows [first, rows()) of a level that no written chunk holds yet: for a
  // whole-chunk level, first must be written_chunks() * chunk_rows(); other levels are read back.
  std::vector<std::uint8_t> rows_bytes(std::size_t level, std::int64_t first) const;
  std::int64_t feature_bytes() const { return feature_bytes_; }
  // Whole chunks whose checksum this writer computed itself, on the writing thread, because
  // their rows came without row checksums (RowBatch::row_checksums).
  std::int64_t chunks_checksummed_here() const { return chunks_checksummed_here_; }
  const std::string& path() const { return path_; }

 private:
  std::vector<hsize_t> capped(std::vector<hsize_t> chunk) const;
  int file_descriptor() const;  // -1 when HDF5 does not say
  // Full chunks of a level go through H5Dwrite_chunk with our own fletcher32 (HDF5's filter
  // runs far below memory speed, ours at it); only the last partial chunk takes HDF5's path.
  struct DirectLevel {
    bool enabled = false;
    std::size_t row_bytes = 0;
    std::vector<std::uint8_t> pending;  // one chunk of rows + 4 checksum bytes
    std::size_t pending_rows = 0;
    std::vector<std::uint32_t> pending_sums;  // the pending rows' checksums, while every row came with one
    std::int64_t rows_written = 0;
  };
  void append_direct(std::size_t level, std::uint8_t* data, std::size_t rows, const std::uint32_t* row_sums,
                     const std::function<void()>& between_chunks);
  void write_pending_chunk(std::size_t level);
  // Writes one full chunk whose rows start at `rows` (row_sums: their checksums, or null). The
  // 4 bytes after the rows must be writable: they hold the checksum during the call.
  void write_chunk(std::size_t level, std::uint8_t* rows, const std::uint32_t* row_sums);
  void flush_pending_rows(std::size_t level);
  void flush_index();
  static constexpr std::size_t kIndexRowsPerWrite = 4096;
  RowBatch index_;  // index columns (groups, windows, splits, bounds, pixel hashes) not yet written
  h5::Dataset create_column(const std::string& name, h5::Type type, std::vector<hsize_t> row_shape,
                            hsize_t chunk_rows);
  h5::Dataset create_dense_label_dataset(const char* name, h5::Type type, std::int64_t height, std::int64_t width,
                                         const StorageOptions& storage);
  void create_mask_dataset(std::int64_t height, std::int64_t width);
  void create_pixel_value_dataset(std::int64_t height, std::int64_t width);

  std::string path_;
  std::vector<LevelSpec> levels_;
  LabelKinds labels_;
  StorageOptions storage_;
  h5::File file_;
  h5::Dataset group_, window_, split_, bounds_, pixel_hash_;
  std::vector<h5::Dataset> level_datasets_;
  std::vector<h5::Dataset> scale_datasets_;  // int8: /scales/<level>, one per level
  std::vector<DirectLevel> direct_;
  hsize_t chunk_rows_ = 1;  // shared by every level: chunk k holds rows [k*R, (k+1)*R) everywhere
  h5::Dataset label_class_, label_value_, label_mask_, label_pixel_value_;
  h5::Datatype storage_type_;
  std::int64_t rows_ = 0;
  std::int64_t expected_rows_ = 0;
  // Disk space kept reserved ahead of the features (file_space.hpp); none for compressed files.
  std::unique_ptr<SpaceReservation> reservation_;
  std::int64_t writeback_offset_ = 0;  // file bytes already handed to start_writeback()
  // After file_: destroyed first, so the file stays open until every requested range is done.
  std::unique_ptr<BackgroundWriteback> writeback_;
  std::int64_t feature_bytes_ = 0;
  std::int64_t chunks_checksummed_here_ = 0;
};

}  // namespace embcache
