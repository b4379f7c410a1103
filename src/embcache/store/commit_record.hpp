// Commit records: what one commit of a precompute run makes durable (docs/precompute.md, "Crash
// safety"). A run builds the new cache file in place (next.h5) and never trusts its HDF5
// structures until it is closed and renamed; each commit fsyncs it and writes a small record:
// the committed rows' index and labels, the file offsets of their finished feature chunks
// (each with its fletcher32), and the rows no finished chunk holds yet. After a crash the next
// run rebuilds the rows from the records and the raw chunk bytes, so features are written once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/cache_schema.hpp"
#include "embcache/store/row_source.hpp"

namespace embcache {

// One level's part of a record.
struct RecordedLevel {
  std::vector<std::int64_t> chunks;  // chunk numbers (chunk k holds rows [k*R, (k+1)*R))
  std::vector<std::uint64_t> addresses, sizes;
  std::int64_t tail_first = 0;       // the record holds the stored bytes of rows [tail_first, end)
  std::vector<std::uint8_t> tail;
};

// Writes a record for rows [first_row, first_row + rows of `parts`) of the file being built.
// `parts` carry the index and labels (their levels are ignored). The file is complete when this
// returns; the caller syncs and renames it (the rename is the commit).
void write_commit_record(const std::string& path, const Signature& signature, const LabelKinds& labels,
                         const std::vector<RowBatch>& parts, std::int64_t first_row, std::int64_t chunk_rows,
                         const std::vector<LevelSpec>& levels, const std::vector<RecordedLevel>& recorded);

// The chunks every record of a run references, and raw, checksum-verified reads of them from
// the file being built (whose HDF5 structures may be damaged).
class RecordedChunks {
 public:
  explicit RecordedChunks(std::string file);
  ~RecordedChunks();
  RecordedChunks(const RecordedChunks&) = delete;
  RecordedChunks& operator=(const RecordedChunks&) = delete;
  void add(std::size_t level, std::int64_t chunk, std::uint64_t address, std::uint64_t size);
  bool has(std::size_t level, std::int64_t chunk) const;
  // Copies rows [row, row + count) of `level`, all inside one recorded chunk, to `dest`.
  void read(std::size_t level, std::int64_t chunk_rows, std::size_t row_bytes, std::int64_t row, std::int64_t count,
            std::uint8_t* dest) const;

 private:
  std::string file_;
  int fd_ = -1;
  std::map<std::pair<std::size_t, std::int64_t>, std::pair<std::uint64_t, std::uint64_t>> chunks_;
  mutable std::pair<std::size_t, std::int64_t> cached_{~std::size_t(0), -1};
  mutable std::vector<std::uint8_t> buffer_;
};

// The rows of one record. Construct every record of a run first (each registers its chunks),
// then read: a row's features come from a recorded chunk when one holds it, else from a record's
// tail.
class CommittedRows : public RowSource {
 public:
  CommittedRows(std::string path, std::shared_ptr<RecordedChunks> chunks);
  const Signature& signature() const { return reader_.signature(); }
  const std::vector<LevelSpec>& levels() const { return levels_; }
  std::int64_t rows() const override { return reader_.rows(); }
  CacheIndex read_index() const override { return reader_.read_index(); }
  RowBatch read_rows(std::int64_t start, std::int64_t count) const override;
  std::int64_t row_feature_bytes() const override;

 private:
  CacheFileReader reader_;  // index and labels: the record is a cache file without levels
  std::shared_ptr<RecordedChunks> chunks_;
  std::vector<LevelSpec> levels_;
  std::int64_t first_row_ = 0;
  std::int64_t chunk_rows_ = 1;
  std::vector<std::int64_t> tail_first_;
};

}  // namespace embcache
