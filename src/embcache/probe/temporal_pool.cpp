#include "embcache/probe/temporal_pool.hpp"

#include <ATen/ATen.h>

#include "embcache/core/error.hpp"

namespace embcache {

TemporalPool parse_temporal_pool(const std::string& text) {
  if (text == "mean") return TemporalPool::kMean;
  if (text == "max") return TemporalPool::kMax;
  if (text == "last") return TemporalPool::kLast;
  throw UsageError(OptionName{"temporal-pool"}, "expected mean, max or last, got \"" + text + "\"");
}

const char* temporal_pool_name(TemporalPool pool) {
  switch (pool) {
    case TemporalPool::kMean: return "mean";
    case TemporalPool::kMax: return "max";
    case TemporalPool::kLast: return "last";
  }
  return "?";
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
