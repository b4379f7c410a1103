// Pixel normalisation before the encoder: value = (raw * scale - mean[c]) / std[c].
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace embcache {

struct Preprocess {
  double scale = 1.0;
  std::vector<double> mean{0.0};  // one value for all channels, or one per (selected) channel
  std::vector<double> std{1.0};

  // Throws UsageError when the scale is zero or not finite, a std is zero, or (given `channels`)
  // the lengths of mean and std fit neither one value nor one per channel.
  void validate(std::int64_t channels = -1) const;
  // [C, h, w] (or [T, C, h, w]) any dtype -> float32 of the same shape; computed in float32 in this exact order so that
  // the same expression in Python gives bit-identical inputs. One pass over the pixels for
  // uint8, int16, int32 and float32 on the CPU (the stage normalises thousands of crops a second,
  // and four ATen operations per crop cost more than their arithmetic); the same bits as
  // apply_with_aten, which handles the rest.
  at::Tensor apply(const at::Tensor& raw) const;
  // The same values written into `out`: a contiguous float32 tensor of raw's shape (a crop's slot
  // in a batch the prep stage fills, so the encoder needs no copy to form its batch).
  void apply_into(const at::Tensor& raw, const at::Tensor& out) const;
  at::Tensor apply_with_aten(const at::Tensor& raw) const;
};

}  // namespace embcache
