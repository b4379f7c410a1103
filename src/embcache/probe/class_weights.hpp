// --class-weights for imbalanced tasks: per-class loss weights from the training split's counts
// (classification: rows; segmentation: labelled pixels; multilabel: a positive weight per label).
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "embcache/core/enum_table.hpp"

namespace embcache {

class ProbeData;

enum class ClassWeightMode { kNone, kBalanced, kInverseSqrt };
const EnumTable<ClassWeightMode>& class_weight_modes();

struct ClassWeights {
  ClassWeightMode mode = ClassWeightMode::kNone;
  at::Tensor counts;   // float64 [K]: train rows (pixels) per class; multilabel: positives per label
  at::Tensor weights;  // float32 [K]: undefined for kNone
  nlohmann::json to_json() const;  // {"mode", "train_counts", "weights"}
};

// From counts n_c over N = sum n_c (multilabel: N = train rows): balanced w_c = N / (K n_c) with K
// the classes present, as scikit-learn's "balanced"; inverse-sqrt w_c proportional to
// 1 / sqrt(n_c), scaled so that the weights average 1 over the training rows (sum n_c w_c = N).
// A class without train rows gets 0.
// Multilabel: the weight of label c's positives, neg_c / pos_c (balanced) or its square root.
at::Tensor weights_from_counts(ClassWeightMode mode, const at::Tensor& counts, double rows, bool multilabel);

// Counts the training split of `data` (its rows at `positions`, a --train-fraction, when given)
// and derives the weights (plan_probe has refused tasks without classes).
ClassWeights train_class_weights(const ProbeData& data, ClassWeightMode mode, const std::vector<std::int64_t>& positions = {});

}  // namespace embcache
