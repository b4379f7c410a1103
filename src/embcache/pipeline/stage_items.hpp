// What flows between the precompute stages, and the queues that carry it:
// read windows -> crops to encode -> encoded batches -> rows to write.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "embcache/core/bounded_queue.hpp"
#include "embcache/core/crop_key.hpp"
#include "embcache/dataset/window_source.hpp"
#include "embcache/store/row_batch.hpp"

namespace embcache {

struct RawWindow {
  std::size_t index = 0;  // into the source's windows()
  WindowData data;
};

struct CropItem {
  CropKey key;
  std::string split;
  std::uint64_t hash = 0;  // the content hash stored with the row
  at::Tensor input;        // float32 [C, h, w], normalised
  bool input_nonfinite = false;  // NaN/Inf float pixels (nodata written as NaN)
  std::int64_t label_class = 0;
  at::Tensor label_value;
  at::Tensor mask;
  at::Tensor pixel_value;
};

struct EncodedBatch {
  std::vector<CropItem> items;     // inputs already released
  std::vector<at::Tensor> levels;  // the selected levels, on the encoder's device
};

// Windows the RawQueue holds: two batches of crops (of the largest batch the encoder may form),
// counting each window by the most crops a window of the run has, and at least two windows.
// With one crop per window and room for only two windows, the reader and prep would hand over
// every other window between two encoder calls instead of filling a batch in one go.
inline std::size_t raw_queue_windows(std::size_t max_batch, std::size_t max_crops_per_window) {
  const std::size_t per_window = max_crops_per_window > 0 ? max_crops_per_window : 1;
  const std::size_t windows = 2 * max_batch / per_window;
  return windows > 2 ? windows : 2;
}

using RawQueue = BoundedQueue<RawWindow>;
using CropQueue = BoundedQueue<CropItem>;
using EncodedQueue = BoundedQueue<EncodedBatch>;
using RowQueue = BoundedQueue<RowBatch>;

// The row queue's depth, in batches, in a bounded (threaded) run. The convert stage's kept row
// memory follows from it (ConvertStage::kKeptRows).
inline constexpr std::size_t kRowQueueBatches = 2;

}  // namespace embcache
