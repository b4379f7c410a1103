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

using RawQueue = BoundedQueue<RawWindow>;
using CropQueue = BoundedQueue<CropItem>;
using EncodedQueue = BoundedQueue<EncodedBatch>;
using RowQueue = BoundedQueue<RowBatch>;

}  // namespace embcache
