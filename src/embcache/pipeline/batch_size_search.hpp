// --batch-size auto: candidate sizes are timed in increasing order on the first crops, and the
// search stops at the first size that does not beat the best before it by a clear margin.
// Each trial costs two encoder calls, at a shape the encoder has not seen (TorchScript profiles
// it again), and its features are thrown away; a size that gains less than the timing noise is
// not worth the next, larger trial.
#pragma once

#include <cstdint>

namespace embcache {

class BatchSizeSearch {
 public:
  // A size must be this much faster per crop than the best so far for a larger one to be tried.
  static constexpr double kMinGain = 0.03;

  // Records one trial (sizes in increasing order); true when the next size is worth trying.
  bool record(std::int64_t batch_size, double crops_per_second);
  // The fastest size tried (0 before any trial).
  std::int64_t chosen() const { return chosen_; }

 private:
  double best_rate_ = 0;
  std::int64_t chosen_ = 0;
};

}  // namespace embcache
