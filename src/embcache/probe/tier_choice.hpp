// Where train-probe keeps the features of a run (docs/train-probe.md, "Feeding the heads: three
// tiers"): a pure function of their size, the budgets and the request, so that every branch is
// unit-tested.
#pragma once

#include <cstdint>

#include "embcache/probe/feature_feed.hpp"
#include "embcache/probe/probe_plan.hpp"

namespace embcache {

struct TierInputs {
  TierRequest request = TierRequest::kAuto;
  bool cuda = false;               // the device is a GPU
  std::int64_t row_bytes = 0;      // resident bytes of one row (every column the heads read)
  std::int64_t rows = 0;           // train + val + test
  std::int64_t val_rows = 0;
  std::int64_t batch_size = 1;
  std::int64_t host_budget = 0;    // bytes
  std::int64_t gpu_budget = 0;     // bytes; 0 without a GPU
};

struct TierChoice {
  FeedTier tier = FeedTier::kHost;
  FeedTier val_tier = FeedTier::kHost;  // the tier, or host when streaming keeps val in memory
  std::int64_t needed = 0;              // bytes to hold every row resident
  std::int64_t buffer_bytes = 0;        // the stream tier's shuffle buffer
};

// auto: the GPU when the features fit its budget, else host memory when they fit that budget,
// else streamed from disk. An explicit tier whose budget is too small, or a host budget too small
// to stream a few batches, is a UsageError that says what to raise.
TierChoice choose_tier(const TierInputs& in);

}  // namespace embcache
