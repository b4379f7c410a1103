#include "embcache/encoder/preprocess.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"

namespace embcache {

void Preprocess::validate(std::int64_t channels) const {
  auto check_length = [&](const std::vector<double>& values, const char* name) {
    if (values.size() != 1 && std::int64_t(values.size()) != channels) {
      throw UsageError(std::string("--") + name + " has " + std::to_string(values.size()) +
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

at::Tensor Preprocess::apply(const at::Tensor& raw) const {
  at::Tensor x = raw.to(at::kFloat);
  if (scale != 1.0) x = x * scale;
  const std::int64_t c = raw.size(-3);  // [C, h, w], or [T, C, h, w]: per band, broadcast over time
  auto per_channel = [c](const std::vector<double>& values) {
    std::vector<float> v(static_cast<std::size_t>(c), static_cast<float>(values[0]));
    if (values.size() == std::size_t(c)) {
      for (std::int64_t i = 0; i < c; ++i) v[std::size_t(i)] = float(values[std::size_t(i)]);
    }
    return at::tensor(v, at::kFloat).view({c, 1, 1});
  };
  return (x - per_channel(mean)) / per_channel(std);
}

}  // namespace embcache
