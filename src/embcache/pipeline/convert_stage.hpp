// Stage 4 of precompute: converts encoded levels to the storage dtype (by torch, never by HDF5;
// int8 by quantisation with scales),
// checks them for NaN/Inf, computes each row's checksum off the I/O thread, and gathers the
// crops' keys and labels into rows for the writer.
#pragma once

#include <optional>
#include <vector>

#include "embcache/core/clock.hpp"
#include "embcache/core/label_kinds.hpp"
#include "embcache/host/tensor_recycler.hpp"
#include "embcache/pipeline/core_sharing.hpp"
#include "embcache/pipeline/run_context.hpp"
#include "embcache/pipeline/stage_items.hpp"
#include "embcache/store/storage_options.hpp"

namespace embcache {

// Where scan_rows found a NaN/Inf: the level and the row within the batch.
struct NonfiniteAt {
  std::size_t level;
  std::int64_t row;
};
// One pass over the stored bytes of every level, row by row while the row is in cache: the
// NaN/Inf check (unless `check_finite` is false), and each row's checksum when the storage has
// them, so that the I/O thread (the bottleneck of fast encoders) only combines them into its
// chunks' checksums. Returns the first NaN/Inf, if any.
std::optional<NonfiniteAt> scan_rows(RowBatch& rows, const StorageOptions& storage, bool check_finite);

class ConvertStage {
 public:
  ConvertStage(EncodedQueue& in, RowQueue& out, StorageOptions storage, bool allow_nonfinite, LabelKinds labels,
               RunContext& context, const StagePriority& priority);

  // Until the encoded queue is drained; then closes the row queue.
  void run();

  StageTime time;
  std::int64_t feature_bytes = 0;  // stored bytes of every row converted

 private:
  RowBatch convert(EncodedBatch& encoded);
  RowBatch quantize(EncodedBatch& encoded);  // --dtype int8: values and their scales
  void gather_labels(const std::vector<CropItem>& items, RowBatch& rows) const;

  EncodedQueue& in_;
  RowQueue& out_;
  const StorageOptions storage_;
  const bool allow_nonfinite_;
  const LabelKinds labels_;
  RunContext& context_;
  const StagePriority& priority_;
  std::vector<LevelSpec> specs_;
  // Per level, the rows' memory, filled again once written (TensorRecycler says why): at most
  // the batches alive at once, this stage's, those in the row queue and the one being written.
  static constexpr std::size_t kKeptRows = 1 + kRowQueueBatches + 1;
  std::vector<TensorRecycler> level_rows_;
};

}  // namespace embcache
