#include "embcache/probe/logreg_fits.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <numeric>

#include "embcache/core/error.hpp"
#include "embcache/core/stop_request.hpp"
#include "embcache/probe/every_core.hpp"
#include "embcache/probe/logistic_regression.hpp"
#include "embcache/probe/probe_pass.hpp"

namespace embcache {
namespace {

// One bank's members (one per C) fitted in increasing C, each from the previous solution.
std::vector<LogregFit> fit_path(ProbePass& pass, Bank& bank, const at::Tensor& z, const at::Tensor& y,
                                const at::Tensor& weights) {
  const auto c_of = [&](std::int64_t g) { return pass.combos[bank.combos[std::size_t(g)]].point().C; };
  std::vector<std::int64_t> order(std::size_t(bank.heads.members()));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return c_of(a) < c_of(b); });
  std::vector<LogregFit> fits(order.size());
  const LogregFit* previous = nullptr;
  for (std::int64_t g : order) {
    if (stop_requested()) throw Interrupted("train-probe interrupted; no results written");
    LogregFit& fit = fits[std::size_t(g)];
    fit = fit_logreg(z, y, pass.data->num_outputs(), c_of(g), weights, previous);
    bank.heads.load_member_state(g, {fit.weight.to(at::kFloat), fit.bias.to(at::kFloat)});
    previous = &fit;
  }
  return fits;
}

// Validation of the fitted members, as one epoch: every C is a result row.
void record_fits(ProbePass& pass, const std::vector<std::vector<LogregFit>>& fits) {
  auto val = pass.evaluate(*pass.val_feed);
  for (std::size_t i = 0; i < pass.banks.size(); ++i) {
    Bank& bank = pass.banks[i];
    for (std::int64_t g = 0; g < bank.heads.members(); ++g) {
      Combination& c = pass.combos[bank.combos[std::size_t(g)]];
      const LogregFit& fit = fits[i][std::size_t(g)];
      CombinationResult& r = c.result;
      r.best_epoch = 1;
      r.best_value = val[i].primary(g);
      r.val = val[i].result(g);
      c.best_state = bank.heads.member_state(g);
      const ProbeCombination& p = c.point();
      nlohmann::json row = {{"epoch", 1}, {"combination", r.id}, {"head", head_name(p.head)},
                            {"levels", pass.config_of(c).levels_text()}, {"lr_base", 0.0}, {"weight_decay", 0.0},
                            {"C", p.C}, {"train_loss", fit.loss}, {"train_fraction", p.train_fraction},
                            {"seed", p.seed}, {"evaluations", fit.evaluations}, {"seconds", pass.train_seconds}};
      row["val"] = scalar_metrics(r.val);
      pass.history.push_back(row);
    }
  }
}

}  // namespace

void fit_logregs(ProbePass& pass) {
  const auto t0 = Clock::now();
  const EveryCore cores(pass.options.threads);
  pass.threads = at::get_num_threads();
  std::vector<std::vector<LogregFit>> fits(pass.banks.size());
  for (const auto& group : pass.groups) {
    at::Tensor y;
    std::vector<at::Tensor> features;
    pass.use_fraction(group.fraction);
    {
      c10::NoGradGuard no_grad;
      features = pass.pooled_split(*pass.train_feed, &y, false, group.banks);
    }
    for (std::size_t j = 0; j < group.banks.size(); ++j) {
      const at::Tensor z = features[j].to(at::kDouble);
      features[j] = at::Tensor();
      const std::size_t b = group.banks[j];
      fits[b] = fit_path(pass, pass.banks[b], z, y, pass.fractions[group.fraction].loss_weights);
    }
    pass.samples_trained += y.size(0);
  }
  pass.train_seconds = seconds_since(t0);
  pass.epochs_run = 1;
  record_fits(pass, fits);
}

}  // namespace embcache
