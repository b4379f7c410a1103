// A block of cache rows in memory: what the pipeline hands to the writer and a reader returns.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace embcache {

struct RowBatch {
  std::vector<std::string> groups, windows, splits;
  std::vector<std::int64_t> bounds;        // 4 per row: x1, y1, x2, y2
  std::vector<std::uint64_t> pixel_hashes;
  std::vector<at::Tensor> levels;  // one per stored level, [n, ...], storage dtype, contiguous CPU
  std::vector<at::Tensor> scales;  // int8 storage: one per level, float32 [n, ...scale_shape], contiguous CPU
  at::Tensor label_class;          // int64 [n]
  at::Tensor label_value;          // float32 [n] or [n, K]
  at::Tensor label_mask;           // int32 [n, h, w]
  at::Tensor label_pixel_value;    // float32 [n, h, w]
  // Optional, computed off the I/O thread: per level, the fletcher32 of each row's stored bytes.
  // The writer combines them into its chunks' checksums (fletcher32_of_rows).
  std::vector<std::vector<std::uint32_t>> row_checksums;
  std::size_t size() const { return windows.size(); }
  std::int64_t feature_bytes() const {
    std::int64_t total = 0;
    for (const auto& t : levels) total += std::int64_t(t.nbytes());
    for (const auto& t : scales) total += std::int64_t(t.nbytes());
    return total;
  }
};

}  // namespace embcache
