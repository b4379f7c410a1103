#include "embcache/probe/optimizer.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "embcache/core/error.hpp"
#include "embcache/host/target_clones.hpp"

namespace embcache {

const EnumTable<OptimizerKind>& optimizer_kinds() {
  static const EnumTable<OptimizerKind> table{{OptimizerKind::kAdamW, "adamw"}, {OptimizerKind::kSgd, "sgd"}};
  return table;
}

const EnumTable<Schedule>& schedules() {
  static const EnumTable<Schedule> table{
      {Schedule::kCosine, "cosine"}, {Schedule::kConstant, "constant"}, {Schedule::kStep, "step"}};
  return table;
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

namespace {

// AdamW's betas and epsilon, SGD's momentum: the same in both paths.
constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kMomentum = 0.9;

// One fused pass per member over float32 CPU tensors: the same update as the ATen expressions in
// step_aten() below, without their eight temporaries (the update is memory-bound, and for a grid of
// linear heads it was a third of each step). Built for AVX-512 and AVX2 too, chosen at load time;
// the file is compiled with -fno-math-errno so that the square root vectorises.
EMBCACHE_TARGET_CLONES("avx512f", "avx2", "default") void adamw_fused(
    float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g, std::int64_t n, float lr, float decay, float b1, float b2,
    float c1, float c2, float eps) {
  const float keep = 1.0f - lr * decay, step = lr / c1, inv_c2 = 1.0f / c2;
  for (std::int64_t i = 0; i < n; ++i) {
    const float mi = b1 * m[i] + (1.0f - b1) * g[i];
    const float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * keep - mi / (std::sqrt(vi * inv_c2) + eps) * step;
  }
}

EMBCACHE_TARGET_CLONES("avx512f", "avx2", "default") void sgd_fused(float* __restrict p, float* __restrict m, const float* __restrict g,
                                                                             std::int64_t n, float lr, float decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float mi = float(kMomentum) * m[i] + (g[i] + p[i] * decay);
    m[i] = mi;
    p[i] -= lr * mi;
  }
}

bool fusable(const at::Tensor& p, const at::Tensor& grad) {
  return p.device().is_cpu() && p.scalar_type() == at::kFloat && grad.scalar_type() == at::kFloat &&
         p.is_contiguous();
}

}  // namespace

void BankOptimizer::step(double factor, const std::vector<bool>& active) {
  c10::NoGradGuard no_grad;
  ++steps_;
  const std::int64_t members = std::int64_t(lr_.size());
  std::vector<double> lr(members), decay(members);
  for (std::int64_t g = 0; g < members; ++g) {
    lr[g] = active[g] ? lr_[g] * factor : 0.0;
    decay[g] = active[g] ? weight_decay_[g] : 0.0;
  }
  const double c1 = 1 - std::pow(kBeta1, double(steps_));
  const double c2 = 1 - std::pow(kBeta2, double(steps_));
  at::Tensor lr_t, decay_t;  // per member, for parameters off the fused path: made once a step
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor p = params_[i];
    if (!p.grad().defined()) continue;
    const at::Tensor grad = p.grad().contiguous();
    if (!fusable(p, grad)) {
      if (!lr_t.defined()) {
        const auto options = p.options().requires_grad(false).dtype(at::kFloat);
        lr_t = at::tensor(lr, at::kDouble).to(options);
        decay_t = at::tensor(decay, at::kDouble).to(options);
      }
      step_aten(i, grad, lr_t, decay_t, c1, c2);
      continue;
    }
    // Members are the leading dimension; an inactive member is left exactly as it is.
    const std::int64_t n = p.numel() / members;
    for (std::int64_t g = 0; g < members; ++g) {
      if (!active[g]) continue;
      const std::int64_t at = g * n;
      if (kind_ == OptimizerKind::kAdamW) {
        adamw_fused(p.data_ptr<float>() + at, first_[i].data_ptr<float>() + at, second_[i].data_ptr<float>() + at,
                    grad.data_ptr<float>() + at, n, float(lr[g]), float(decay[g]), float(kBeta1), float(kBeta2),
                    float(c1), float(c2), float(kEps));
      } else {
        sgd_fused(p.data_ptr<float>() + at, first_[i].data_ptr<float>() + at, grad.data_ptr<float>() + at, n,
                  float(lr[g]), float(decay[g]));
      }
    }
  }
}

// The same update as tensor expressions, for parameters on the GPU (one kernel per expression,
// every member at once).
void BankOptimizer::step_aten(std::size_t i, const at::Tensor& grad, const at::Tensor& lr, const at::Tensor& decay,
                              double c1, double c2) {
  at::Tensor p = params_[i];
  std::vector<std::int64_t> shape(p.dim(), 1);
  shape[0] = lr.size(0);
  const at::Tensor lr_b = lr.view(shape);
  const at::Tensor decay_b = decay.view(shape);
  if (kind_ == OptimizerKind::kAdamW) {
    first_[i].mul_(kBeta1).add_(grad, 1 - kBeta1);
    second_[i].mul_(kBeta2).addcmul_(grad, grad, 1 - kBeta2);
    p.mul_(1 - lr_b * decay_b);
    const at::Tensor denom = (second_[i] / c2).sqrt_().add_(kEps);
    p.sub_(first_[i] / denom * (lr_b / c1));
  } else {
    const at::Tensor g = grad + p * decay_b;
    first_[i].mul_(kMomentum).add_(g);
    p.sub_(first_[i] * lr_b);
  }
}

}  // namespace embcache
