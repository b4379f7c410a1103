#include "embcache/dataset/cropper.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace embcache {

bool dtype_holds(at::ScalarType type, double value) {
  if (at::isFloatingType(type)) return true;
  if (std::floor(value) != value) return false;
  switch (type) {
    case at::kByte: return value >= 0 && value <= 255;
    case at::kChar: return value >= -128 && value <= 127;
    case at::kShort: return value >= -32768 && value <= 32767;
    case at::kInt: return value >= -2147483648.0 && value <= 2147483647.0;
    case at::kLong: return std::abs(value) <= 9007199254740992.0;
    default: return false;
  }
}

namespace {

// Copies the part of `source` ([..., H, W] in window coordinates) that overlaps `crop` into a
// tensor of the crop's size filled with `fill`.
at::Tensor padded_slice(const at::Tensor& source, const Bounds& window, const Bounds& crop,
                        const at::Scalar& fill) {
  const std::int64_t rank = source.dim();
  std::vector<std::int64_t> shape(source.sizes().begin(), source.sizes().end());
  shape[rank - 2] = crop.height();
  shape[rank - 1] = crop.width();
  const std::int64_t x1 = std::max(crop.x1, window.x1), x2 = std::min(crop.x2, window.x2);
  const std::int64_t y1 = std::max(crop.y1, window.y1), y2 = std::min(crop.y2, window.y2);
  const at::Tensor inside = source.slice(rank - 1, x1 - window.x1, x2 - window.x1)
                                .slice(rank - 2, y1 - window.y1, y2 - window.y1);
  if (x1 == crop.x1 && x2 == crop.x2 && y1 == crop.y1 && y2 == crop.y2) {
    return inside.contiguous();
  }
  // A fill the raw dtype cannot hold (--pad-value -1 on uint8 pixels) pads in float32, the type
  // preprocessing converts every crop to anyway; the copied pixels keep their values.
  const bool fits = dtype_holds(source.scalar_type(), fill.toDouble());
  at::Tensor out = at::full(shape, fill, fits ? source.options() : source.options().dtype(at::kFloat));
  if (x2 > x1 && y2 > y1) {
    out.slice(rank - 1, x1 - crop.x1, x2 - crop.x1)
        .slice(rank - 2, y1 - crop.y1, y2 - crop.y1)
        .copy_(inside);
  }
  return out;
}

}  // namespace

CropPixels cut_crop(const at::Tensor& pixels, const at::Tensor& mask, const Bounds& window_bounds,
                    const Bounds& crop, const CropperOptions& options, const at::Tensor& pixel_value) {
  CropPixels result;
  at::Tensor source = pixels;
  if (!options.bands.empty()) {
    source = pixels.index_select(pixels.dim() - 3, at::tensor(options.bands, at::kLong));  // [C, H, W] or [T, C, H, W]
  }
  result.pixels = padded_slice(source, window_bounds, crop, options.pad_value);
  if (mask.defined()) {
    result.mask = padded_slice(mask, window_bounds, crop, options.mask_pad_value);
  }
  if (pixel_value.defined()) {
    result.pixel_value = padded_slice(pixel_value, window_bounds, crop, std::nan(""));
  }
  return result;
}

}  // namespace embcache
