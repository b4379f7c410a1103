#include "embcache/probe/metrics.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace embcache {
namespace {

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::vector<double> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kDouble).contiguous().cpu();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// Per-class F1 averaged over classes that occur in the targets or the predictions.
double macro_f1(const at::Tensor& tp, const at::Tensor& fp, const at::Tensor& fn) {
  const at::Tensor denom = 2 * tp + fp + fn;
  const at::Tensor present = denom > 0;
  if (!present.any().item<bool>()) return NAN;
  return (2 * tp / denom.clamp_min(1e-300)).masked_select(present).mean().item<double>();
}

// Average precision of one class with sample weights: sum over positives of the precision at
// their rank, weighted (sklearn's step-wise definition).
double average_precision(const at::Tensor& score, const at::Tensor& positive, const at::Tensor& weight) {
  const at::Tensor order = at::argsort(score, 0, /*descending=*/true);
  const at::Tensor w = weight.index_select(0, order);
  const at::Tensor wy = w * positive.index_select(0, order);
  const double total = wy.sum().item<double>();
  if (total <= 0) return NAN;
  const at::Tensor precision = wy.cumsum(0) / w.cumsum(0).clamp_min(1e-300);
  return (precision * wy).sum().item<double>() / total;
}

}  // namespace

const char* primary_metric(ProbeTask task) {
  switch (task) {
    case ProbeTask::kClassification: return "accuracy";
    case ProbeTask::kMultilabel: return "map";
    case ProbeTask::kSegmentation: return "miou";
    case ProbeTask::kRegression:
    case ProbeTask::kPixelRegression: return "rmse";
  }
  return "?";
}

bool higher_is_better(ProbeTask task) {
  return task != ProbeTask::kRegression && task != ProbeTask::kPixelRegression;
}

MetricAccumulator::MetricAccumulator(ProbeTask task, std::int64_t outputs, std::int64_t ignore_index, std::int64_t members)
    : task_(task), k_(outputs), ignore_(ignore_index), members_(members) {
  if (task_ == ProbeTask::kClassification || task_ == ProbeTask::kSegmentation) {
    confusion_ = at::zeros({members_, k_, k_}, at::kLong);
  }
}

void MetricAccumulator::add(const at::Tensor& outputs_any, const at::Tensor& target_any) {
  a_ = b_ = c_ = at::Tensor();
  const at::Tensor outputs = outputs_any.detach().to(at::kCPU, at::kFloat);
  const at::Tensor target = target_any.to(at::kCPU);
  const std::int64_t batch = outputs.size(1);
  switch (task_) {
    case ProbeTask::kClassification: {
      const at::Tensor pred = outputs.argmax(-1);
      parts_a_.push_back(target);
      parts_b_.push_back(pred);
      if (k_ > 5) parts_c_.push_back(  // with 5 classes or fewer, top-5 is always right
          (std::get<1>(outputs.topk(5, -1)) == target.view({1, batch, 1})).any(-1));
      for (std::int64_t g = 0; g < members_; ++g) {
        confusion_[g].add_(at::bincount(target * k_ + pred[g], {}, k_ * k_).view({k_, k_}));
      }
      break;
    }
    case ProbeTask::kMultilabel:
      parts_a_.push_back(target.to(at::kFloat));
      parts_b_.push_back(outputs.sigmoid());
      break;
    case ProbeTask::kSegmentation: {
      const at::Tensor pred = outputs.argmax(2);  // [G, B, h, w]
      const at::Tensor valid = target != ignore_;
      const at::Tensor crop = at::arange(batch, at::kLong).view({batch, 1, 1}).expand_as(target);
      const at::Tensor t = target.to(at::kLong).masked_select(valid);
      const at::Tensor n = crop.masked_select(valid);
      std::vector<at::Tensor> stats;
      for (std::int64_t g = 0; g < members_; ++g) {
        const at::Tensor p = pred[g].masked_select(valid);
        const at::Tensor per_crop = at::bincount((n * k_ + t) * k_ + p, {}, batch * k_ * k_).view({batch, k_, k_});
        confusion_[g].add_(per_crop.sum(0));
        const at::Tensor tp = per_crop.diagonal(0, 1, 2);
        stats.push_back(at::stack({tp, per_crop.sum(1) - tp, per_crop.sum(2) - tp}, -1));  // [B, K, 3]
      }
      parts_b_.push_back(at::stack(stats));
      break;
    }
    case ProbeTask::kRegression: {
      const at::Tensor t = target.to(at::kDouble).view({1, batch, -1});
      const at::Tensor e = outputs.to(at::kDouble) - t;
      const at::Tensor tt = t.expand_as(e);
      parts_b_.push_back(at::stack({at::ones_like(e), e.abs(), e * e, tt, tt * tt}, -1));  // [G, B, K, 5]
      break;
    }
    case ProbeTask::kPixelRegression: {
      const at::Tensor valid_b = target.is_floating_point() ? at::isfinite(target) : target != ignore_;
      const at::Tensor valid = valid_b.to(at::kDouble).unsqueeze(0);  // [1, B, h, w]
      const at::Tensor t = at::where(valid_b, target.to(at::kDouble), at::zeros({}, at::kDouble)).unsqueeze(0);
      const at::Tensor e = (outputs.select(2, 0).to(at::kDouble) - t) * valid;
      const at::Tensor tv = t * valid;
      auto sum = [](const at::Tensor& x) { return x.sum({2, 3}); };
      parts_b_.push_back(at::stack({sum(valid.expand_as(e)), sum(e.abs()), sum(e * e), sum(tv), sum(tv * t)}, -1).unsqueeze(2));
      break;
    }
  }
}

void MetricAccumulator::finalize() const {
  if (b_.defined()) return;
  const int unit_dim = 1;  // records are [G, N, ...] except the shared targets [N, ...]
  if (!parts_a_.empty()) a_ = at::cat(parts_a_, 0);
  if (!parts_b_.empty()) b_ = at::cat(parts_b_, unit_dim);
  if (!parts_c_.empty()) c_ = at::cat(parts_c_, unit_dim);
}

nlohmann::json MetricAccumulator::compute(std::int64_t g, const at::Tensor& weights) const {
  finalize();
  nlohmann::json j;
  if (!b_.defined()) return j;
  const at::Tensor w = weights.to(at::kDouble);
  switch (task_) {
    case ProbeTask::kClassification: {
      const at::Tensor conf = at::zeros({k_ * k_}, at::kDouble).index_add_(0, a_ * k_ + b_[g], w).view({k_, k_});
      const at::Tensor tp = conf.diagonal();
      const double total = conf.sum().item<double>();
      j["accuracy"] = number_or_null(tp.sum().item<double>() / total);
      if (c_.defined()) j["top5_accuracy"] = number_or_null((c_[g].to(at::kDouble) * w).sum().item<double>() / total);
      j["macro_f1"] = number_or_null(macro_f1(tp, conf.sum(0) - tp, conf.sum(1) - tp));
      break;
    }
    case ProbeTask::kMultilabel: {
      const at::Tensor scores = b_[g];
      const at::Tensor pred = (scores >= 0.5).to(at::kDouble);
      const at::Tensor wy = a_.to(at::kDouble) * w.view({-1, 1});
      const at::Tensor tp = (pred * wy).sum(0);
      const at::Tensor fp = (pred * (1 - a_.to(at::kDouble)) * w.view({-1, 1})).sum(0);
      const at::Tensor fn = wy.sum(0) - tp;
      std::vector<double> aps;
      for (std::int64_t k = 0; k < k_; ++k) {
        const double ap = average_precision(scores.select(1, k), a_.select(1, k).to(at::kDouble), w);
        if (std::isfinite(ap)) aps.push_back(ap);
      }
      double map = NAN;
      if (!aps.empty()) {
        map = 0;
        for (double ap : aps) map += ap / double(aps.size());
      }
      j["map"] = number_or_null(map);
      const double tps = tp.sum().item<double>(), fps = fp.sum().item<double>(), fns = fn.sum().item<double>();
      j["micro_f1"] = number_or_null(2 * tps / (2 * tps + fps + fns));
      j["macro_f1"] = number_or_null(macro_f1(tp, fp, fn));
      break;
    }
    case ProbeTask::kSegmentation: {
      const at::Tensor s = (b_[g].to(at::kDouble) * w.view({-1, 1, 1})).sum(0);  // [K, 3]
      const at::Tensor tp = s.select(1, 0), fp = s.select(1, 1), fn = s.select(1, 2);
      const at::Tensor union_ = tp + fp + fn;
      const at::Tensor present = union_ > 0;
      j["miou"] = number_or_null(present.any().item<bool>()
                                     ? (tp / union_.clamp_min(1e-300)).masked_select(present).mean().item<double>()
                                     : NAN);
      j["pixel_accuracy"] = number_or_null(tp.sum().item<double>() / (tp + fn).sum().item<double>());
      j["macro_f1"] = number_or_null(macro_f1(tp, fp, fn));
      break;
    }
    case ProbeTask::kRegression:
    case ProbeTask::kPixelRegression: {
      const at::Tensor s = (b_[g] * w.view({-1, 1, 1})).sum(0);  // [K, 5]
      const at::Tensor n = s.select(1, 0);
      const double count = n.sum().item<double>();
      j["mae"] = number_or_null(s.select(1, 1).sum().item<double>() / count);
      j["rmse"] = number_or_null(std::sqrt(s.select(1, 2).sum().item<double>() / count));
      const at::Tensor total = s.select(1, 4) - s.select(1, 3).pow(2) / n.clamp_min(1e-300);
      j["r2"] = number_or_null((1 - s.select(1, 2) / total).mean().item<double>());
      break;
    }
  }
  return j;
}

nlohmann::json MetricAccumulator::result(std::int64_t g) const {
  finalize();
  if (!b_.defined()) return nlohmann::json::object();
  const std::int64_t units = b_.size(1);
  nlohmann::json j = compute(g, at::ones({units}, at::kDouble));
  if (confusion_.defined()) {
    const at::Tensor conf = confusion_[g].to(at::kDouble);
    const at::Tensor tp = conf.diagonal();
    std::vector<nlohmann::json> per_class;
    if (task_ == ProbeTask::kClassification) {
      for (double v : to_vector(tp / conf.sum(1))) per_class.push_back(number_or_null(v));
      j["per_class_recall"] = per_class;
    } else {
      for (double v : to_vector(tp / (conf.sum(0) + conf.sum(1) - tp))) per_class.push_back(number_or_null(v));
      j["per_class_iou"] = per_class;
    }
    std::vector<std::vector<std::int64_t>> rows;
    const at::Tensor c = confusion_[g].contiguous();
    for (std::int64_t r = 0; r < k_; ++r) {
      rows.emplace_back(c[r].data_ptr<std::int64_t>(), c[r].data_ptr<std::int64_t>() + k_);
    }
    j["confusion_matrix"] = rows;  // rows: target class, columns: predicted class
  }
  return j;
}

double MetricAccumulator::primary(std::int64_t g) const {
  finalize();
  if (!b_.defined()) return NAN;
  const auto j = compute(g, at::ones({b_.size(1)}, at::kDouble));
  const auto& v = j.value(primary_metric(task_), nlohmann::json(nullptr));
  return v.is_number() ? v.get<double>() : NAN;
}

nlohmann::json MetricAccumulator::bootstrap(std::int64_t g, std::int64_t samples, std::uint64_t seed) const {
  finalize();
  if (!b_.defined() || samples <= 0) return nlohmann::json::object();
  const std::int64_t units = b_.size(1);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0xb0075);
  std::map<std::string, std::vector<double>> draws;
  for (std::int64_t s = 0; s < samples; ++s) {
    const at::Tensor pick = at::randint(units, {units}, gen, at::kLong);
    const at::Tensor weights = at::bincount(pick, {}, units).to(at::kDouble);
    const nlohmann::json metrics = compute(g, weights);
    for (const auto& [name, value] : metrics.items()) {
      if (value.is_number()) draws[name].push_back(value.get<double>());
    }
  }
  nlohmann::json j;
  for (auto& [name, values] : draws) {
    std::vector<double>& sorted = values;  // C++17 lambdas cannot capture a structured binding
    std::sort(sorted.begin(), sorted.end());
    auto at_q = [&](double q) { return sorted[std::size_t(std::floor(q * double(sorted.size() - 1) + 0.5))]; };
    j[name] = {at_q(0.025), at_q(0.975)};
  }
  return j;
}

}  // namespace embcache
