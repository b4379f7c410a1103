// Rows of cache data that can be merged into a cache file: a cache file, or the rows a commit
// record holds (commit_record.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "embcache/store/row_batch.hpp"

namespace embcache {

struct CacheIndex {
  std::vector<std::string> groups, windows, splits;
  std::vector<std::int64_t> bounds;  // 4 per row
  std::vector<std::uint64_t> pixel_hashes;
};

class RowSource {
 public:
  virtual ~RowSource() = default;
  virtual std::int64_t rows() const = 0;
  virtual CacheIndex read_index() const = 0;
  // Rows [start, start + count): index, labels and every level.
  virtual RowBatch read_rows(std::int64_t start, std::int64_t count) const = 0;
  virtual std::int64_t row_feature_bytes() const = 0;
};

}  // namespace embcache
