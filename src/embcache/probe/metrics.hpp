// Evaluation metrics of every task, for all members of a head bank at once, with bootstrap
// confidence intervals. Metric names are the keys of metrics.json (docs/train-probe.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "embcache/probe/probe_data.hpp"

namespace embcache {

// The metric that picks the best epoch and combination, and whether larger is better.
const char* primary_metric(ProbeTask task);
bool higher_is_better(ProbeTask task);

class MetricAccumulator {
 public:
  MetricAccumulator(ProbeTask task, std::int64_t outputs, std::int64_t ignore_index, std::int64_t members);
  // outputs: [G, B, K] (or [G, B, K, h, w] for dense tasks); target: class ids [B], values
  // [B, K], or the mask [B, h, w].
  void add(const at::Tensor& outputs, const at::Tensor& target);
  // Metrics of member g over everything added: {"accuracy": ..., "macro_f1": ..., ...}.
  nlohmann::json result(std::int64_t g) const;
  double primary(std::int64_t g) const;
  // 95% percentile intervals of the scalar metrics of member g over `samples` resamples of the
  // evaluation units (images, or crops for dense tasks): {"accuracy": [lo, hi], ...}.
  nlohmann::json bootstrap(std::int64_t g, std::int64_t samples, std::uint64_t seed) const;

 private:
  nlohmann::json compute(std::int64_t g, const at::Tensor& weights) const;
  void finalize() const;

  ProbeTask task_;
  std::int64_t k_, ignore_, members_;
  // Per-unit records, appended per batch and concatenated on first use.
  mutable std::vector<at::Tensor> parts_a_, parts_b_, parts_c_;
  mutable at::Tensor a_, b_, c_;
  mutable at::Tensor confusion_;  // [G, K, K] (classification and segmentation)
};

}  // namespace embcache
