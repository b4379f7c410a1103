// Optimizers and learning-rate schedules for head banks: each member has its own learning rate
// and weight decay, and its update equals what the optimizer would do to that head alone.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "embcache/core/enum_table.hpp"

namespace embcache {

enum class OptimizerKind { kAdamW, kSgd };
const EnumTable<OptimizerKind>& optimizer_kinds();

enum class Schedule { kCosine, kConstant, kStep };
const EnumTable<Schedule>& schedules();

// Learning-rate multiplier for optimizer step `step` (0-based) of `total`: linear warm-up over the
// first `warmup` steps, then cosine to 0, constant, or x0.1 at 60% and again at 85% of training.
double schedule_factor(Schedule schedule, std::int64_t step, std::int64_t total, std::int64_t warmup);

class BankOptimizer {
 public:
  // AdamW (betas 0.9/0.999, eps 1e-8, decoupled weight decay) or SGD (momentum 0.9, L2 decay).
  BankOptimizer(OptimizerKind kind, std::vector<at::Tensor> params, const std::vector<double>& lr,
                const std::vector<double>& weight_decay);
  // One step with learning rates lr * factor; members with active[g] == false do not move.
  void step(double factor, const std::vector<bool>& active);
  void zero_grad();

 private:
  void step_aten(std::size_t i, const at::Tensor& grad, const at::Tensor& lr, const at::Tensor& decay, double c1,
                 double c2);

  OptimizerKind kind_;
  std::vector<at::Tensor> params_, first_, second_;
  std::vector<double> lr_, weight_decay_;
  std::int64_t steps_ = 0;
};

}  // namespace embcache
