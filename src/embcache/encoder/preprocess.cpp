#include "embcache/encoder/preprocess.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/host/target_clones.hpp"

namespace embcache {

void Preprocess::validate(std::int64_t channels) const {
  auto check_length = [&](const std::vector<double>& values, const char* name) {
    if (values.size() != 1 && std::int64_t(values.size()) != channels) {
      throw UsageError(OptionName{name}, "has " + std::to_string(values.size()) +
                       " values; give one, or one per input channel (" + std::to_string(channels) +
                       ")");
    }
  };
  if (!std::isfinite(scale) || scale == 0.0) {
    throw UsageError(OptionName{"scale"}, "expected a finite, non-zero factor, got " + format_number(scale));
  }
  if (channels >= 0) {
    check_length(mean, "mean");
    check_length(std, "std");
  }
  for (double s : std) {
    if (s == 0.0) throw UsageError(OptionName{"std"}, "values must be non-zero");
  }
}

namespace {

// ((float(raw) * scale) - mean) / std per channel plane, one pass. Every step is one IEEE float
// operation in the order of ATen's expression (apply_with_aten), and this file is compiled with
// -ffp-contract=off so that no step fuses into the next: the bits are the same as ATen's.
// AVX-512, AVX2 and plain builds per pixel type, chosen at load time.
template <typename T>
EMBCACHE_TARGET_CLONES("avx512f", "avx2", "default")
void normalise_planes(const T* __restrict in, float* __restrict out, std::int64_t planes, std::int64_t channels,
                      std::int64_t plane_size, float scale, bool scaled, const std::vector<float>& mean,
                      const std::vector<float>& std) {
  for (std::int64_t p = 0; p < planes; ++p) {
    const float m = mean[std::size_t(p % channels)], s = std[std::size_t(p % channels)];
    const T* src = in + p * plane_size;
    float* dst = out + p * plane_size;
    if (scaled) {
      for (std::int64_t i = 0; i < plane_size; ++i) dst[i] = (static_cast<float>(src[i]) * scale - m) / s;
    } else {
      for (std::int64_t i = 0; i < plane_size; ++i) dst[i] = (static_cast<float>(src[i]) - m) / s;
    }
  }
}

std::vector<float> per_channel_values(const std::vector<double>& values, std::int64_t c) {
  std::vector<float> v(static_cast<std::size_t>(c), static_cast<float>(values[0]));
  if (values.size() == std::size_t(c)) {
    for (std::int64_t i = 0; i < c; ++i) v[std::size_t(i)] = float(values[std::size_t(i)]);
  }
  return v;
}

}  // namespace

at::Tensor Preprocess::apply(const at::Tensor& raw) const {
  at::Tensor out = at::empty(raw.sizes(), raw.options().dtype(at::kFloat).memory_format(at::MemoryFormat::Contiguous));
  apply_into(raw, out);
  return out;
}

void Preprocess::apply_into(const at::Tensor& raw, const at::Tensor& out) const {
  if (out.scalar_type() != at::kFloat || !out.is_contiguous() || out.sizes() != raw.sizes()) {
    throw std::logic_error("Preprocess::apply_into: out must be a contiguous float32 tensor of the input's shape");
  }
  const std::int64_t c = raw.size(-3);  // [C, h, w], or [T, C, h, w]: per band, broadcast over time
  const std::int64_t plane = raw.size(-1) * raw.size(-2);
  if (!raw.is_cpu() || !out.is_cpu() || plane == 0) {
    out.copy_(apply_with_aten(raw));
    return;
  }
  const at::Tensor in = raw.contiguous();
  const std::int64_t planes = in.numel() / plane;
  const std::vector<float> m = per_channel_values(mean, c), s = per_channel_values(std, c);
  const float f = float(scale);
  const bool scaled = scale != 1.0;
  float* dst = out.data_ptr<float>();
  switch (in.scalar_type()) {
    case at::kByte: normalise_planes(in.data_ptr<std::uint8_t>(), dst, planes, c, plane, f, scaled, m, s); break;
    case at::kShort: normalise_planes(in.data_ptr<std::int16_t>(), dst, planes, c, plane, f, scaled, m, s); break;
    case at::kInt: normalise_planes(in.data_ptr<std::int32_t>(), dst, planes, c, plane, f, scaled, m, s); break;
    case at::kFloat: normalise_planes(in.data_ptr<float>(), dst, planes, c, plane, f, scaled, m, s); break;
    default: out.copy_(apply_with_aten(raw));
  }
}

at::Tensor Preprocess::apply_with_aten(const at::Tensor& raw) const {
  at::Tensor x = raw.to(at::kFloat);
  if (scale != 1.0) x = x * scale;
  const std::int64_t c = raw.size(-3);
  auto per_channel = [c](const std::vector<double>& values) {
    return at::tensor(per_channel_values(values, c), at::kFloat).view({c, 1, 1});
  };
  return (x - per_channel(mean)) / per_channel(std);
}

}  // namespace embcache
