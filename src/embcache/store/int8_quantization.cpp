#include "embcache/store/int8_quantization.hpp"

#include <ATen/ATen.h>

#include <vector>

namespace embcache {
namespace {

// `scales` viewed with singleton axes for the feature axes of a tensor of rank `rank`.
at::Tensor broadcastable(const at::Tensor& scales, std::int64_t rank) {
  std::vector<std::int64_t> shape(scales.sizes().begin(), scales.sizes().end());
  shape.resize(std::size_t(rank), 1);
  return scales.reshape(shape);
}

}  // namespace

Int8Rows quantize_int8(const at::Tensor& x, std::int64_t feature_axes) {
  const at::Tensor f = x.to(at::kFloat);
  std::vector<std::int64_t> axes;
  for (std::int64_t a = f.dim() - feature_axes; a < f.dim(); ++a) axes.push_back(a);
  Int8Rows out;
  out.scales = f.abs().amax(axes) / 127.0f;
  const at::Tensor s = broadcastable(out.scales, f.dim());
  // Where a whole channel is 0 the scale is 0: every q is 0 and q * scale is exact.
  const at::Tensor q = at::where(s > 0, (f / s).round(), at::zeros({}, f.options()));
  out.values = q.clamp(-127, 127).to(at::kChar).contiguous();
  out.scales = out.scales.contiguous();
  return out;
}

at::Tensor dequantize_int8(const at::Tensor& q, const at::Tensor& scales) {
  return q.to(at::kFloat) * broadcastable(scales.to(q.device(), at::kFloat), q.dim());
}

}  // namespace embcache
