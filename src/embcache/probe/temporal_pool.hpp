// How train-probe reduces a level's time axis before any head (--temporal-pool): the same
// reduction in the feature feed and, as TorchScript source, inside the exported head.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "embcache/core/enum_table.hpp"

namespace embcache {

enum class TemporalPool { kMean, kMax, kLast };
const EnumTable<TemporalPool>& temporal_pools();

// Reduces axis 1 (T) of [B, T, ...].
at::Tensor pool_time(const at::Tensor& x, TemporalPool pool);
// The same as a TorchScript expression of the variable `x`: "x.mean(1)".
std::string pool_time_source(const std::string& x, TemporalPool pool);

}  // namespace embcache
