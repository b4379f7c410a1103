// Cuts one crop (pixels and mask) out of a window, selecting bands and padding past the edge.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "embcache/core/crop_key.hpp"

namespace embcache {

struct CropPixels {
  at::Tensor pixels;  // [C', h, w] (or [T, C', h, w]), the window's dtype, contiguous
  at::Tensor mask;    // [h, w] int32, or undefined
  at::Tensor pixel_value;  // [h, w] float32 (NaN past the edge), or undefined
};

struct CropperOptions {
  std::vector<std::int64_t> bands;  // empty = all channels, in order
  double pad_value = 0.0;
  std::int64_t mask_pad_value = -1;  // the dataset's ignore index
};

// Whether `type` holds `value` exactly (a floating type holds every value). A pad value the
// pixels' type cannot hold is applied in float32, by cut_crop and by the rslearn reader.
bool dtype_holds(at::ScalarType type, double value);

// `window_bounds` are the coordinates of pixels[:, 0, 0]; `crop` may extend past the right and
// bottom edges (windows smaller than the crop), where pixels take pad_value and masks the ignore
// index, as rslearn pads.
CropPixels cut_crop(const at::Tensor& pixels, const at::Tensor& mask, const Bounds& window_bounds,
                    const Bounds& crop, const CropperOptions& options,
                    const at::Tensor& pixel_value = at::Tensor());

}  // namespace embcache
