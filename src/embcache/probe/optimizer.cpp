#include "embcache/probe/optimizer.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "embcache/core/error.hpp"

namespace embcache {

OptimizerKind parse_optimizer(const std::string& text) {
  if (text == "adamw") return OptimizerKind::kAdamW;
  if (text == "sgd") return OptimizerKind::kSgd;
  throw UsageError("--optimizer: expected adamw or sgd, got \"" + text + "\"");
}

Schedule parse_schedule(const std::string& text) {
  if (text == "cosine") return Schedule::kCosine;
  if (text == "constant") return Schedule::kConstant;
  if (text == "step") return Schedule::kStep;
  throw UsageError("--schedule: expected cosine, constant or step, got \"" + text + "\"");
}

double schedule_factor(Schedule schedule, std::int64_t step, std::int64_t total, std::int64_t warmup) {
  if (step < warmup) return double(step + 1) / double(warmup + 1);
  const double span = double(std::max<std::int64_t>(1, total - warmup));
  const double progress = double(step - warmup) / span;
  switch (schedule) {
    case Schedule::kConstant: return 1.0;
    case Schedule::kCosine: return 0.5 * (1.0 + std::cos(M_PI * progress));
    case Schedule::kStep: return progress < 0.6 ? 1.0 : progress < 0.85 ? 0.1 : 0.01;
  }
  return 1.0;
}

BankOptimizer::BankOptimizer(OptimizerKind kind, std::vector<at::Tensor> params, const std::vector<double>& lr,
                             const std::vector<double>& weight_decay)
    : kind_(kind), params_(std::move(params)), lr_(lr), weight_decay_(weight_decay) {
  for (const auto& p : params_) {
    first_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous).detach());
    second_.push_back(kind_ == OptimizerKind::kAdamW ? at::zeros_like(p).detach() : at::Tensor());
  }
}

void BankOptimizer::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

void BankOptimizer::step(double factor, const std::vector<bool>& active) {
  at::NoGradGuard no_grad;
  ++steps_;
  const std::int64_t members = std::int64_t(lr_.size());
  std::vector<double> lr(members), decay(members);
  for (std::int64_t g = 0; g < members; ++g) {
    lr[g] = active[g] ? lr_[g] * factor : 0.0;
    decay[g] = active[g] ? weight_decay_[g] : 0.0;
  }
  const auto options = params_.front().options().requires_grad(false);
  const at::Tensor lr_t = at::tensor(lr, at::kDouble).to(options.dtype(at::kFloat).device());
  const at::Tensor decay_t = at::tensor(decay, at::kDouble).to(options.dtype(at::kFloat).device());
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor p = params_[i];
    const at::Tensor grad = p.grad();
    if (!grad.defined()) continue;
    std::vector<std::int64_t> shape(p.dim(), 1);
    shape[0] = members;
    const at::Tensor lr_b = lr_t.view(shape);
    const at::Tensor decay_b = decay_t.view(shape);
    if (kind_ == OptimizerKind::kAdamW) {
      first_[i].mul_(b1).add_(grad, 1 - b1);
      second_[i].mul_(b2).addcmul_(grad, grad, 1 - b2);
      const double c1 = 1 - std::pow(b1, double(steps_));
      const double c2 = 1 - std::pow(b2, double(steps_));
      p.mul_(1 - lr_b * decay_b);
      const at::Tensor denom = (second_[i] / c2).sqrt_().add_(eps);
      p.sub_(first_[i] / denom * (lr_b / c1));
    } else {
      const at::Tensor g = grad + p * decay_b;
      first_[i].mul_(0.9).add_(g);
      p.sub_(first_[i] * lr_b);
    }
  }
}

}  // namespace embcache
