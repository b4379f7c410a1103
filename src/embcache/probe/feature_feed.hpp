// Feeds batches of cached features to the trainer from one of three tiers: GPU-resident,
// host-resident, or streamed from HDF5 through a bounded shuffle buffer (docs/train-probe.md).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "embcache/core/enum_table.hpp"
#include "embcache/probe/probe_data.hpp"
#include "embcache/probe/temporal_pool.hpp"

namespace embcache {

enum class FeedTier { kGpu, kHost, kStream };
const EnumTable<FeedTier>& feed_tiers();
const char* tier_name(FeedTier tier);  // feed_tiers()'s name

// One tensor per batch row that the heads consume: a level (pooled to [C] when only pooled heads
// read it, else [C, H, W] in the storage dtype; a time axis reduced first) or the mask.
struct FeedColumn {
  std::string level;  // empty for the dense-target column (mask, or per-pixel values)
  bool pooled = false;
  bool quantized = false;  // int8 maps: held as int8 with their scales, de-quantised on the device
  bool temporal = false;   // the level has a time axis, reduced by `temporal_pool` on load
  TemporalPool temporal_pool = TemporalPool::kMean;
  bool pixel_values = false;  // the dense-target column holds /labels/pixel_value (float32)
  std::vector<std::int64_t> row_shape;  // as delivered to the heads
  std::int64_t resident_row_bytes = 0;  // as held in memory by the resident tiers
};

struct FeedBatch {
  std::vector<at::Tensor> columns;  // on the device; levels float32, the mask int64
  at::Tensor targets;               // image-level targets on the device (undefined for dense tasks)
  at::Tensor ids;                   // split-local row ids, int64, CPU
};

struct FeedStats {
  std::int64_t bytes_resident = 0;
  std::int64_t bytes_read = 0;
  double read_seconds = 0;
  double wait_seconds = 0;
  std::int64_t batches = 0;
  std::int64_t batches_ready = 0;     // batches that were waiting when the trainer asked
  std::int64_t rows_read = 0;         // stream: rows read from disk
  std::int64_t rows_used = 0;         // stream: of those, rows of the split
  nlohmann::json to_json(FeedTier tier) const;
};

class FeatureFeed {
 public:
  // Builds the feed of one split; resident tiers load the split's columns now.
  FeatureFeed(const ProbeData& data, int split, std::vector<FeedColumn> columns, FeedTier tier,
              c10::Device device, std::int64_t batch_size, std::int64_t stream_buffer_bytes);
  ~FeatureFeed();
  FeatureFeed(const FeatureFeed&) = delete;
  FeatureFeed& operator=(const FeatureFeed&) = delete;

  std::int64_t rows() const;  // the rows a pass visits (all of the split, or those of restrict_rows)
  std::int64_t batches_per_epoch() const;
  // Later passes visit only these split-local rows (ascending, e.g. a --train-fraction); an
  // empty list: every row again. Resident tiers keep what they hold; the stream reads fewer blocks.
  void restrict_rows(const std::vector<std::int64_t>& rows);
  // Starts one pass: in a seeded random order, or in row order when `shuffle` is false.
  void start(bool shuffle, std::uint64_t seed);
  // The next batch of the pass; nullopt at its end. Rethrows a reader thread's error.
  std::optional<FeedBatch> next();
  const FeedStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The column of a level as the heads want it, and the mask column of a dense task.
FeedColumn level_column(const ProbeData& data, const LevelSpec& level, bool pooled,
                        TemporalPool temporal_pool = TemporalPool::kMean);
FeedColumn mask_column(const ProbeData& data);
// Bytes one row of `columns` occupies when resident.
std::int64_t resident_row_bytes(const std::vector<FeedColumn>& columns);

}  // namespace embcache
