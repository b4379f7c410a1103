#include "embcache/probe/class_weights.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>
#include <stdexcept>

#include "embcache/core/error.hpp"
#include "embcache/probe/probe_data.hpp"

namespace embcache {
namespace {

// Labelled pixels per class over the training split's masks (those at `positions` when given),
// read a block of rows at a time.
at::Tensor mask_counts(const ProbeData& data, const std::vector<std::int64_t>& positions) {
  const std::int64_t k = data.num_outputs();
  at::Tensor counts = at::zeros({k}, at::kDouble);
  constexpr std::int64_t kBlock = 1024;
  std::vector<bool> keep;
  if (!positions.empty()) {
    keep.assign(std::size_t(data.train().size()), false);
    for (auto p : positions) keep.at(std::size_t(p)) = true;
  }
  std::size_t position = 0;
  for (std::size_t c = 0; c < data.train().rows.size(); ++c) {
    std::vector<std::int64_t> rows;
    for (auto r : data.train().rows[c]) {
      if (keep.empty() || keep[position]) rows.push_back(r);
      ++position;
    }
    const CacheReader& cache = *data.caches()[c];
    for (std::size_t i = 0; i < rows.size();) {
      const std::int64_t start = rows[i];
      const std::int64_t end = std::min(start + kBlock, cache.rows());
      std::vector<std::int64_t> picked;
      while (i < rows.size() && rows[i] < end) picked.push_back(rows[i++] - start);
      const at::Tensor masks = cache.read_masks(start, end - start).index_select(0, at::tensor(picked, at::kLong));
      const at::Tensor valid = masks.flatten();
      const at::Tensor labelled = valid.masked_select((valid != data.ignore_index()) & (valid >= 0) & (valid < k));
      counts += at::bincount(labelled.to(at::kLong), {}, k).to(at::kDouble);
    }
  }
  return counts;
}

}  // namespace

const EnumTable<ClassWeightMode>& class_weight_modes() {
  static const EnumTable<ClassWeightMode> table{{ClassWeightMode::kNone, "none"},
                                                {ClassWeightMode::kBalanced, "balanced"},
                                                {ClassWeightMode::kInverseSqrt, "inverse-sqrt"}};
  return table;
}

nlohmann::json ClassWeights::to_json() const {
  nlohmann::json j = {{"mode", class_weight_modes().name(mode)}};
  if (counts.defined()) {
    const at::Tensor c = counts.contiguous();
    j["train_counts"] = std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  }
  if (weights.defined()) {
    const at::Tensor w = weights.to(at::kDouble).contiguous();
    j["weights"] = std::vector<double>(w.data_ptr<double>(), w.data_ptr<double>() + w.numel());
  }
  return j;
}

at::Tensor weights_from_counts(ClassWeightMode mode, const at::Tensor& counts, double rows, bool multilabel) {
  const at::Tensor n = counts.to(at::kDouble);
  const at::Tensor present = n > 0;
  const at::Tensor safe = at::where(present, n, at::ones_like(n));
  at::Tensor w;
  if (multilabel) {
    const at::Tensor ratio = (rows - n) / safe;  // negatives per positive
    w = mode == ClassWeightMode::kBalanced ? ratio : ratio.sqrt();
  } else {
    // K counts the classes the train split has, as scikit-learn counts the labels in y.
    const double total = n.sum().item<double>(), k = present.sum().item<double>();
    if (mode == ClassWeightMode::kBalanced) {
      w = total / (k * safe);
    } else {
      w = 1.0 / safe.sqrt();
      w = w * (total / (n * w).sum().item<double>());
    }
  }
  return at::where(present, w, at::zeros_like(w)).to(at::kFloat);
}

ClassWeights train_class_weights(const ProbeData& data, ClassWeightMode mode, const std::vector<std::int64_t>& positions) {
  ClassWeights cw;
  cw.mode = mode;
  if (mode == ClassWeightMode::kNone) return cw;
  const ProbeTask task = data.task();
  const bool multilabel = task == ProbeTask::kMultilabel;
  double rows = double(positions.empty() ? data.train().size() : std::int64_t(positions.size()));
  at::Tensor targets = data.targets(0);
  if (targets.defined() && !positions.empty()) targets = targets.index_select(0, at::tensor(positions, at::kLong));
  if (task == ProbeTask::kClassification) {
    cw.counts = at::bincount(targets.to(at::kLong), {}, data.num_outputs()).to(at::kDouble);
  } else if (multilabel) {
    cw.counts = targets.to(at::kDouble).gt(0.5).to(at::kDouble).sum(0);
  } else if (task == ProbeTask::kSegmentation) {
    cw.counts = mask_counts(data, positions);
    rows = cw.counts.sum().item<double>();
  } else {
    throw std::logic_error("train_class_weights: plan_probe refuses --class-weights for a task without classes");
  }
  cw.weights = weights_from_counts(mode, cw.counts, rows, multilabel);
  return cw;
}

}  // namespace embcache
