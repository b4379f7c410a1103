// --head logreg: multinomial logistic regression fitted by full-batch L-BFGS in float64, along a
// grid of C with warm starts (scikit-learn's LogisticRegression(solver="lbfgs") objective).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace embcache {

// The default --C grid: 11 values log-spaced over [1e-6, 1e4], one per decade (torchgeo-bench
// spans the same range with 40).
std::vector<double> default_c_grid();

struct LogregFit {
  at::Tensor weight;  // float64 [K, D]
  at::Tensor bias;    // float64 [K]
  double loss = 0;    // the objective at the solution
  std::int64_t evaluations = 0;  // objective and gradient evaluations
};

// Minimises mean_i w_{y_i} CE(z_i W^T + b, y_i) + |W|^2 / (2 C n): scikit-learn's
// C sum_i CE_i + |W|^2 / 2 divided by C n (the same minimiser), the intercept unpenalised.
// z: float64 [n, D] on any device; y: int64 [n]; class_weights: [K] or undefined. `warm`: a
// previous solution to start from (the neighbouring C), or null for zeros.
LogregFit fit_logreg(const at::Tensor& z, const at::Tensor& y, std::int64_t classes, double c,
                     const at::Tensor& class_weights, const LogregFit* warm);

}  // namespace embcache
