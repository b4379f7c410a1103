// int8 storage (--dtype int8): symmetric quantisation with one float32 scale per row and channel
// of a map (per row of a vector; per time step too), x ~= q * scale with |error| <= scale / 2.
// docs/cache-format.md gives the formula and an h5py snippet that de-quantises.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace embcache {

struct Int8Rows {
  at::Tensor values;  // int8, the shape of the input
  at::Tensor scales;  // float32, the input's shape without its last `feature_axes` axes
};

// scale = max |x| / 127 over the last `feature_axes` axes (2 for maps: H, W; 1 for vectors: C),
// q = round(x / scale) (0 where scale is 0), all in float32, on x's device. x must be finite.
Int8Rows quantize_int8(const at::Tensor& x, std::int64_t feature_axes);
// q * scale in float32, on q's device.
at::Tensor dequantize_int8(const at::Tensor& q, const at::Tensor& scales);

}  // namespace embcache
