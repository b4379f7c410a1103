#include "embcache/probe/epoch_training.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "embcache/host/cpu_info.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/progress.hpp"
#include "embcache/core/stop_request.hpp"
#include "embcache/probe/bank_lanes.hpp"
#include "embcache/probe/probe_pass.hpp"

namespace embcache {
namespace {

// Batches held at once while banks train side by side: 3 banks on 2 lanes then take 3 x 4 / 2 = 6
// bank-steps of time per 4 batches (1.5 per batch) instead of 2 per batch with a barrier after
// each; the memory is 4 batches of the feed's columns.
constexpr std::size_t kLaneWindowBatches = 4;

// Per-member training loss [G] for outputs [G, B, ...].
at::Tensor member_losses(ProbeTask task, const at::Tensor& out, const FeedBatch& batch, std::int64_t ignore_index,
                         double label_smoothing, const at::Tensor& class_weights) {
  const std::int64_t g = out.size(0), b = out.size(1);
  switch (task) {
    case ProbeTask::kClassification:
      return at::cross_entropy_loss(out.reshape({g * b, out.size(2)}), batch.targets.repeat({g}), class_weights,
                                    at::Reduction::None, -100, label_smoothing)
          .view({g, b})
          .mean(1);
    case ProbeTask::kMultilabel:
      return at::binary_cross_entropy_with_logits(out, batch.targets.unsqueeze(0).expand_as(out), {}, class_weights,
                                                  at::Reduction::None)
          .mean({1, 2});
    case ProbeTask::kRegression:
      return (out - batch.targets.unsqueeze(0)).pow(2).mean({1, 2});
    case ProbeTask::kSegmentation: {
      const at::Tensor mask = batch.columns.back();
      const at::Tensor loss = at::cross_entropy_loss(out.reshape({g * b, out.size(2), out.size(3), out.size(4)}),
                                                     mask.repeat({g, 1, 1}), class_weights, at::Reduction::None,
                                                     ignore_index, label_smoothing);
      const at::Tensor valid = (mask != ignore_index).sum().clamp_min(1).to(at::kFloat);
      return loss.view({g, -1}).sum(1) / valid;
    }
    case ProbeTask::kPixelRegression: {
      // Targets: per-pixel values (NaN = none) or mask values (the ignore index = none).
      const at::Tensor target = batch.columns.back();
      const at::Tensor valid_b = target.is_floating_point() ? at::isfinite(target) : target != ignore_index;
      const at::Tensor valid = valid_b.to(at::kFloat).unsqueeze(0);
      const at::Tensor values = at::where(valid_b, target.to(at::kFloat), at::zeros({}, out.options()));
      const at::Tensor err = (out.select(2, 0) - values.unsqueeze(0)).pow(2) * valid;
      return err.view({g, -1}).sum(1) / valid.sum().clamp_min(1);
    }
  }
  return at::Tensor();
}

class EpochTrainer {
 public:
  EpochTrainer(ProbePass& pass, std::size_t lanes) : pass_(pass) {
    pass_.threads = at::get_num_threads();
    // Banks side by side on the cores the intra-op threads leave free (probe/bank_lanes.hpp).
    const std::size_t lane_count =
        lanes > 0 ? lanes : bank_lane_count(pass_.device, at::get_num_threads(), std::size_t(usable_cpus()));
    if (lane_count > 1 && pass_.banks.size() > 1) {
      lanes_.emplace(std::min(lane_count, pass_.banks.size()), at::get_num_threads());
      pass_.bank_lanes = lanes_->lanes();
    }
  }

  void run() {
    pass_.wait_before_training = pass_.train_feed->stats().wait_seconds;  // the stats pass waits too
    std::int64_t steps_per_epoch = 0;
    for (auto& group : pass_.groups) {
      pass_.use_fraction(group.fraction);
      group.steps_per_epoch = pass_.train_feed->batches_per_epoch();
      group.total_steps = group.steps_per_epoch * pass_.options.epochs;
      group.warmup_steps = std::int64_t(std::llround(pass_.options.warmup_epochs * double(group.steps_per_epoch)));
      steps_per_epoch += group.steps_per_epoch;
    }
    const std::int64_t epochs = pass_.options.epochs;
    for (std::int64_t epoch = 1; epoch <= epochs; ++epoch) {
      const auto t_epoch = Clock::now();
      Progress progress("epoch " + std::to_string(epoch) + "/" + std::to_string(epochs), steps_per_epoch,
                        pass_.options.quiet ? Progress::Mode::kQuiet : Progress::Mode::kAuto);
      std::vector<at::Tensor> loss_sum;
      for (const auto& bank : pass_.banks) {
        loss_sum.push_back(at::zeros({bank.heads.members()}, at::TensorOptions().dtype(at::kDouble).device(pass_.device)));
      }
      std::vector<std::int64_t> seen(pass_.groups.size(), 0);
      std::int64_t done = 0;
      for (std::size_t g = 0; g < pass_.groups.size(); ++g) {
        seen[g] = train_group(pass_.groups[g], epoch, loss_sum, [&] { progress.update(++done); });
        pass_.samples_trained += seen[g];
      }
      progress.finish();
      pass_.train_seconds += seconds_since(t_epoch);
      ++pass_.epochs_run;
      if (!validate_epoch(epoch, loss_sum, seen, t_epoch)) break;
    }
  }

 private:
  // Validation after an epoch: best states, early stopping, divergence and the history rows.
  // Returns whether any combination is still training.
  bool validate_epoch(std::int64_t epoch, const std::vector<at::Tensor>& loss_sum, const std::vector<std::int64_t>& seen,
                      Clock::time_point t_epoch) {
    auto val = pass_.evaluate(*pass_.val_feed);
    const double epoch_seconds = seconds_since(t_epoch);
    bool any_active = false;
    for (std::size_t i = 0; i < pass_.banks.size(); ++i) {
      Bank& bank = pass_.banks[i];
      const std::size_t in_group = pass_.combos[bank.combos.front()].group;
      const TrainGroup& group = pass_.groups[in_group];
      const at::Tensor mean_loss = (loss_sum[i] / double(std::max<std::int64_t>(1, seen[in_group]))).cpu();
      for (std::int64_t g = 0; g < bank.heads.members(); ++g) {
        Combination& c = pass_.combos[bank.combos[std::size_t(g)]];
        if (!c.active) continue;
        const double loss = mean_loss[g].item<double>();
        if (!std::isfinite(loss)) {
          diverged(c, epoch);
          continue;
        }
        const nlohmann::json metrics = val[i].result(g);
        keep_if_better(c, val[i].primary(g), metrics, bank, g, epoch);
        any_active = any_active || c.active;
        const ProbeCombination& p = c.point();
        nlohmann::json row = {{"epoch", epoch}, {"combination", c.result.id}, {"head", head_name(p.head)},
                              {"levels", pass_.config_of(c).levels_text()}, {"lr_base", p.lr},
                              {"weight_decay", p.weight_decay}, {"train_loss", loss},
                              {"lr", p.lr * schedule_factor(pass_.plan.schedule, std::max<std::int64_t>(0, group.step - 1),
                                                            group.total_steps, group.warmup_steps)},
                              {"train_fraction", p.train_fraction}, {"seed", p.seed},
                              {"seconds", epoch_seconds}};
        row["val"] = scalar_metrics(metrics);
        pass_.history.push_back(row);
      }
    }
    return any_active;
  }

  // One diverging learning rate of a sweep must not cost the others: this combination stops, and
  // keeps its best epoch before the divergence if it had one.
  void diverged(Combination& c, std::int64_t epoch) {
    c.active = false;
    c.result.diverged_epoch = epoch;
    pass_.warnings.push_back("training diverged: the loss of " + c.result.id + " is not finite in epoch " +
                             std::to_string(epoch) +
                             (c.best_state.empty() ? "; it has no result"
                                                   : "; its best epoch before that, " +
                                                         std::to_string(c.result.best_epoch) + ", stays a candidate") +
                             "; lower its learning rate (or check the features for NaN)");
  }

  // A better validation value keeps this epoch's state; otherwise the patience runs down.
  void keep_if_better(Combination& c, double value, const nlohmann::json& metrics, const Bank& bank, std::int64_t g,
                      std::int64_t epoch) {
    CombinationResult& r = c.result;
    const bool better = std::isnan(r.best_value) || (pass_.higher ? value > r.best_value : value < r.best_value);
    if (better && std::isfinite(value)) {
      r.best_value = value;
      r.best_epoch = epoch;
      r.val = metrics;
      c.best_state = bank.heads.member_state(g);
      c.epochs_since_best = 0;
    } else {
      ++c.epochs_since_best;
      if (pass_.options.patience > 0 && c.epochs_since_best >= pass_.options.patience) c.active = false;
    }
  }

  // The next `limit` batches of the train feed (fewer at the end of the pass) and their schedule
  // factors; false when the pass has none left.
  bool next_window(const TrainGroup& group, std::size_t limit, std::vector<FeedBatch>& window,
                   std::vector<double>& factors) {
    window.clear();
    factors.clear();
    while (window.size() < limit) {
      auto batch = pass_.train_feed->next();
      if (!batch) break;
      if (stop_requested()) throw Interrupted("train-probe interrupted; no results written");
      factors.push_back(schedule_factor(pass_.plan.schedule, group.step + std::int64_t(window.size()), group.total_steps,
                                        group.warmup_steps));
      window.push_back(std::move(*batch));
    }
    return !window.empty();
  }

  // One epoch of one train group: its fraction's rows in its seed's order, every active bank of
  // the group a step per batch. Returns the rows seen; adds each bank's loss x rows to loss_sum.
  template <typename Tick>
  std::int64_t train_group(TrainGroup& group, std::int64_t epoch, std::vector<at::Tensor>& loss_sum, Tick tick) {
    std::vector<std::size_t> live;
    for (auto b : group.banks) {
      const auto& members = pass_.banks[b].combos;
      if (std::any_of(members.begin(), members.end(), [&](std::size_t ci) { return pass_.combos[ci].active; })) {
        live.push_back(b);
      }
    }
    if (live.empty()) return 0;
    const FractionRows& fraction = pass_.fractions[group.fraction];
    pass_.use_fraction(group.fraction);
    std::int64_t seen = 0;
    pass_.train_feed->start(true, group.seed * 1000003ull + std::uint64_t(epoch));
    // Banks on lanes take a window of batches at once, each bank its batches in order, with no
    // barrier between batches (BankLanes::run_chains); otherwise one batch at a time.
    const bool side_by_side = lanes_ && live.size() > 1;
    const std::size_t window_batches = side_by_side ? kLaneWindowBatches : 1;
    std::vector<FeedBatch> window;
    std::vector<double> factors;
    const auto step = [&](std::size_t k, std::size_t t) {
      Bank& bank = pass_.banks[live[k]];
      std::vector<bool> active;
      for (auto ci : bank.combos) active.push_back(pass_.combos[ci].active);
      const FeedBatch& batch = window[t];
      const at::Tensor out = bank.heads.forward(pass_.bank_inputs(live[k], batch), true);
      const at::Tensor losses = member_losses(pass_.task, out, batch, pass_.data->ignore_index(),
                                              pass_.options.label_smoothing, fraction.loss_weights);
      losses.sum().backward();
      bank.optimizer->step(factors[t], active);
      bank.optimizer->zero_grad();
      loss_sum[live[k]].add_(losses.detach().to(at::kDouble) * double(batch.ids.size(0)));
    };
    while (next_window(group, window_batches, window, factors)) {
      if (side_by_side) {
        lanes_->run_chains(live.size(), window.size(), step);
      } else {
        for (std::size_t t = 0; t < window.size(); ++t) {
          for (std::size_t k = 0; k < live.size(); ++k) step(k, t);
        }
      }
      for (const auto& batch : window) {
        seen += batch.ids.size(0);
        ++group.step;
        tick();
      }
    }
    return seen;
  }

  ProbePass& pass_;
  std::optional<BankLanes> lanes_;  // when banks train side by side
};

}  // namespace

void train_epochs(ProbePass& pass, std::size_t lanes) { EpochTrainer(pass, lanes).run(); }

}  // namespace embcache
