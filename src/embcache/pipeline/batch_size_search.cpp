#include "embcache/pipeline/batch_size_search.hpp"

namespace embcache {

bool BatchSizeSearch::record(std::int64_t batch_size, double crops_per_second) {
  const bool gained = chosen_ == 0 || crops_per_second > best_rate_ * (1 + kMinGain);
  if (crops_per_second > best_rate_) {
    best_rate_ = crops_per_second;
    chosen_ = batch_size;
  }
  return gained;
}

}  // namespace embcache
