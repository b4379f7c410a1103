// One train-probe pass as every head family shares it: the grid's combinations (each holding its
// planned point and the result it reaches), the head banks they train in, the train groups and
// label fractions, the feeds of the three splits, evaluation, and the choice of the best
// combination. The families fill in the results (probe/epoch_training.hpp,
// probe/logreg_fits.hpp, probe/knn_votes.hpp); probe/pass_outputs.hpp writes them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "embcache/core/clock.hpp"
#include "embcache/probe/class_weights.hpp"
#include "embcache/probe/feature_feed.hpp"
#include "embcache/probe/heads.hpp"
#include "embcache/probe/metrics.hpp"
#include "embcache/probe/optimizer.hpp"
#include "embcache/probe/probe_data.hpp"
#include "embcache/probe/probe_plan.hpp"
#include "embcache/probe/run_outputs.hpp"

namespace embcache {

// One --train-fraction of the train split: its rows and what is computed from them.
struct FractionRows {
  double fraction = 1;
  std::vector<std::int64_t> rows;  // train-split positions; empty: every row
  std::int64_t train_rows = 0;
  ClassWeights class_weights;
  at::Tensor loss_weights;  // class_weights on the device; undefined: none
};

// Banks that share one pass over the train rows per epoch: one fraction in one batch order
// (--seed-mode full: a group per seed, as a lone run; init: one group for every seed).
struct TrainGroup {
  std::size_t fraction = 0;  // into ProbePass::fractions
  std::uint64_t seed = 0;    // of the batch order and the dropout masks
  std::vector<std::size_t> banks;
  std::int64_t steps_per_epoch = 0, total_steps = 0, warmup_steps = 0, step = 0;
};

// The combinations of one head configuration in one train group, stacked (HeadBank).
struct Bank {
  HeadBank heads;
  std::vector<std::size_t> combos;  // member g -> combination index
  std::vector<std::size_t> inputs;  // feed column index of each of the head's levels
  std::unique_ptr<BankOptimizer> optimizer;
};

// One combination of the grid in this pass: its result (which holds its planned point), where it
// trains, and its training state.
struct Combination {
  CombinationResult result;
  std::size_t group = 0;  // its TrainGroup
  std::size_t bank = 0;
  std::int64_t member = 0;
  bool active = true;  // still training: not stopped early, not diverged
  std::int64_t epochs_since_best = 0;
  std::vector<at::Tensor> best_state;  // its parameters at result.best_epoch; empty: none

  const ProbeCombination& point() const { return result.point; }
};

// The scalar metrics of a metrics object (what history rows keep of a validation).
nlohmann::json scalar_metrics(const nlohmann::json& metrics);

class ProbePass {
 public:
  // Everything before a head family trains: the data opened and split, the grid grouped into
  // banks, the tier chosen and the feeds loaded, the banks that standardise given their
  // statistics. Prints the data's warnings.
  explicit ProbePass(const ProbePlan& plan);
  ~ProbePass();
  ProbePass(const ProbePass&) = delete;
  ProbePass& operator=(const ProbePass&) = delete;

  const ProbePlan& plan;
  const ProbeOptions& options;  // plan.options: its numbers, paths and split names
  const ProbeTask task;
  const c10::Device device;
  Clock::time_point t_start;
  std::unique_ptr<ProbeData> data;
  bool higher = true;   // the primary metric: larger is better
  std::string primary;  // its name

  // The grid, in the plan's order; its banks, train groups and fractions.
  std::vector<Combination> combos;
  std::vector<Bank> banks;
  std::vector<TrainGroup> groups;
  std::vector<FractionRows> fractions;  // --train-fraction, in the grid's order
  std::vector<FeedColumn> columns;
  std::map<std::string, std::size_t> column_of;  // level name -> its column

  // The data tier.
  std::int64_t needed = 0, host_budget = 0, gpu_budget = 0, buffer_bytes = 0;
  FeedTier tier = FeedTier::kHost;
  FeedTier val_tier = FeedTier::kHost;  // the tier, or host when streaming keeps val in memory
  std::unique_ptr<FeatureFeed> train_feed, val_feed, test_feed;
  double load_seconds = 0;

  // What the family that trains the pass records.
  std::vector<std::string> warnings;  // of the training itself (diverged combinations)
  nlohmann::json history = nlohmann::json::array();  // one row per epoch and combination
  std::int64_t epochs_run = 0, samples_trained = 0;
  double train_seconds = 0, wait_before_training = 0;
  int threads = 0;              // LibTorch's intra-op threads while the heads trained or fitted
  std::size_t bank_lanes = 1;   // banks side by side (probe/bank_lanes.hpp)
  std::size_t best = 0;         // the combination choose_best picked

  const FractionRows& fraction_of(const Combination& c) const { return fractions[groups[c.group].fraction]; }
  const HeadConfig& config_of(const Combination& c) const { return banks[c.bank].heads.config(); }
  // Later passes of the train feed visit fraction f's rows.
  void use_fraction(std::size_t f);
  // The feed columns bank b reads from `batch`, in its levels' order.
  std::vector<at::Tensor> bank_inputs(std::size_t b, const FeedBatch& batch) const;
  // Every bank on one pass of `feed`; one accumulator per bank.
  std::vector<MetricAccumulator> evaluate(FeatureFeed& feed);
  // One split's pooled features per bank, as the bank's first layer reads them (L2-normalised
  // when `normalize`), and its targets, in row order: what logreg fits and k-NN queries with.
  // `of`: those banks, in that order (default: every bank).
  std::vector<at::Tensor> pooled_split(FeatureFeed& feed, at::Tensor* targets, bool normalize,
                                       std::vector<std::size_t> of = {});
  // Epoch-trained and fitted heads: best states back in, then the best combination chosen and
  // every combination with a result tested (InputError when every one diverged).
  void test_best_states();
  // Picks `best` by validation (a point's mean over its seeds); prints the training's warnings
  // first, once training has a result. InputError when no combination has a finite metric.
  void choose_best();
  // Writes combination c's head.pt from its bank member (valid while the pass lives).
  std::function<void(const std::string&)> member_saver(const Combination& c) const;

 private:
  void open_data();
  std::vector<HeadConfig> configure_grid(std::vector<std::size_t>& config_of);
  std::vector<std::size_t> build_groups();
  FractionRows fraction_rows_of(double fraction) const;
  void build_grid();
  void build_banks(const std::vector<HeadConfig>& configs, const std::vector<std::size_t>& config_of,
                   const std::vector<std::size_t>& group_of);
  void name_combinations();
  void choose_tier();
  void standardize();
  void standardize_banks(std::size_t fraction, const std::vector<std::size_t>& mine);

  std::size_t current_fraction_ = std::numeric_limits<std::size_t>::max();  // the train feed's rows
};

// One head of the grid on one level set, shapes from `cache`: a pass trains it, preflight_probe
// only validates it (with `outputs` 0). `out_size` is the mask's {h, w}.
HeadConfig configure_head(HeadType type, const std::vector<std::string>& level_set, const CacheReader& cache,
                          std::vector<std::int64_t> out_size, std::int64_t outputs, const ProbePlan& plan);

}  // namespace embcache
