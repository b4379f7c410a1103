#include "embcache/probe/temporal_pool.hpp"

#include <ATen/ATen.h>


namespace embcache {

const EnumTable<TemporalPool>& temporal_pools() {
  static const EnumTable<TemporalPool> table{
      {TemporalPool::kMean, "mean"}, {TemporalPool::kMax, "max"}, {TemporalPool::kLast, "last"}};
  return table;
}

at::Tensor pool_time(const at::Tensor& x, TemporalPool pool) {
  switch (pool) {
    case TemporalPool::kMax: return x.amax(1);
    case TemporalPool::kLast: return x.select(1, x.size(1) - 1);
    default: return x.mean(1);
  }
}

std::string pool_time_source(const std::string& x, TemporalPool pool) {
  switch (pool) {
    case TemporalPool::kMax: return x + ".amax(1)";
    case TemporalPool::kLast: return x + ".select(1, " + x + ".size(1) - 1)";
    default: return x + ".mean(1)";
  }
}

}  // namespace embcache
