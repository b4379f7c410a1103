#include "embcache/encoder/allocator_scope.hpp"
#include "embcache/probe/trainer.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "embcache/core/clock.hpp"
#include "embcache/core/cpu_info.hpp"
#include "embcache/core/device.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/core/intra_op_threads.hpp"
#include "embcache/core/memory_info.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/core/progress.hpp"
#include "embcache/core/stop_request.hpp"
#include "embcache/probe/bank_lanes.hpp"
#include "embcache/probe/feature_feed.hpp"
#include "embcache/probe/logistic_regression.hpp"
#include "embcache/probe/heads.hpp"
#include "embcache/probe/knn.hpp"
#include "embcache/probe/metrics.hpp"
#include "embcache/probe/optimizer.hpp"
#include "embcache/probe/run_outputs.hpp"
#include "embcache/probe/tier_choice.hpp"

namespace embcache {
namespace {

// Batches held at once while banks train side by side: 3 banks on 2 lanes then take 3 x 4 / 2 = 6
// bank-steps of time per 4 batches (1.5 per batch) instead of 2 per batch with a barrier after
// each; the memory is 4 batches of the feed's columns.
constexpr std::size_t kLaneWindowBatches = 4;

// One point of the grid: a head on a level set with a learning rate and weight decay.
struct Combination {
  std::string id;
  HeadConfig head;
  std::string levels_requested;
  double lr = 0, weight_decay = 0;
  double C = 0;  // logreg
  std::int64_t k = 0;  // knn
  double train_fraction = 1;
  std::uint64_t seed = 0;
  std::string point;   // the id without the seed: what is summarised over seeds
  std::size_t group = 0;  // its TrainGroup
  std::size_t bank = 0;
  std::int64_t member = 0;
  // Training state.
  bool active = true;
  std::int64_t best_epoch = 0;
  double best_value = NAN;
  nlohmann::json best_val;
  std::int64_t epochs_since_best = 0;
  std::int64_t diverged_epoch = 0;  // the epoch its training loss stopped being finite (0: never)
  std::vector<at::Tensor> best_state;
  nlohmann::json test;
  nlohmann::json test_ci;
};

std::string divergence(const Combination& c) {
  return "training diverged: the loss of " + c.id + " is not finite in epoch " + std::to_string(c.diverged_epoch);
}

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
  std::size_t fraction = 0;  // into the trainer's fractions
  std::uint64_t seed = 0;    // of the batch order and the dropout masks
  std::vector<std::size_t> banks;
  std::int64_t steps_per_epoch = 0, total_steps = 0, warmup_steps = 0, step = 0;
};

struct Bank {
  HeadBank heads;
  std::vector<std::size_t> combos;  // member g -> combination index
  std::vector<std::size_t> inputs;  // feed column index of each of the head's levels
  std::unique_ptr<BankOptimizer> optimizer;
};

// One head of the grid on one level set, shapes from `cache`: build_grid trains it,
// preflight_probe only validates it (with `outputs` 0). `out_size` is the mask's {h, w}.
HeadConfig configure_head(HeadType type, const std::vector<std::string>& level_set, const CacheReader& cache,
                          std::vector<std::int64_t> out_size, std::int64_t outputs, const ProbePlan& plan) {
  HeadConfig config;
  config.type = type;
  config.task = plan.task;
  for (const auto& name : level_set) {
    const LevelSpec& level = find_level(cache, name);
    config.levels.push_back(level.name);
    config.level_shapes.push_back(level.pooled_time_shape());  // the feed reduces time first
    config.temporal.push_back(level.temporal());
  }
  config.temporal_pool = plan.temporal_pool;
  config.outputs = outputs;
  config.out_size = std::move(out_size);
  config.hidden = plan.hidden;
  // mlp and upernet default to 512 wide (upernet as PANGAEA and mmsegmentation); conv, fpn, unet to 128.
  if ((type == HeadType::kMlp || type == HeadType::kUpernet) && config.hidden.empty()) config.hidden = {512};
  config.dropout = plan.options.dropout;
  config.conv_blocks = plan.options.conv_blocks;
  config.standardize = plan.standardizes(type);
  config.validate();
  return config;
}

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

at::Tensor eval_target(ProbeTask task, const FeedBatch& batch) {
  return is_dense(task) ? batch.columns.back() : batch.targets;
}

std::vector<at::Tensor> bank_inputs(const Bank& bank, const FeedBatch& batch) {
  std::vector<at::Tensor> inputs;
  for (auto c : bank.inputs) inputs.push_back(batch.columns[c]);
  return inputs;
}

// Evaluates every bank on one pass of `feed`; one accumulator per bank.
std::vector<MetricAccumulator> evaluate(std::vector<Bank>& banks, FeatureFeed& feed, const ProbeData& data) {
  std::vector<MetricAccumulator> acc;
  for (const auto& bank : banks) acc.emplace_back(data.task(), data.num_outputs(), data.ignore_index(), bank.heads.members());
  c10::NoGradGuard no_grad;
  feed.start(false, 0);
  while (auto batch = feed.next()) {
    if (stop_requested()) throw Interrupted("train-probe interrupted; no results written");
    for (std::size_t i = 0; i < banks.size(); ++i) {
      acc[i].add(banks[i].heads.forward(bank_inputs(banks[i], *batch), false), eval_target(data.task(), *batch));
    }
  }
  return acc;
}

// Channel mean and std of each (column, pooled?) over the training split, as float64 sums.
struct ChannelStats {
  at::Tensor sum, sum_sq;
  double count = 0;
  void add(const at::Tensor& x) {  // x: [B, C] or [B, C, H, W]
    const at::Tensor d = x.to(at::kDouble);
    const std::vector<std::int64_t> dims = d.dim() == 4 ? std::vector<std::int64_t>{0, 2, 3} : std::vector<std::int64_t>{0};
    const at::Tensor s = d.sum(dims), q = (d * d).sum(dims);
    sum = sum.defined() ? sum + s : s;
    sum_sq = sum_sq.defined() ? sum_sq + q : q;
    count += double(d.numel() / d.size(1));
  }
  std::pair<at::Tensor, at::Tensor> mean_std() const {
    const at::Tensor mean = sum / count;
    const at::Tensor var = (sum_sq / count - mean * mean).clamp_min(0);
    at::Tensor std = var.sqrt();
    std = at::where(std > 1e-6, std, at::ones_like(std));
    return {mean.to(at::kFloat), std.to(at::kFloat)};
  }
};

}  // namespace

void preflight_probe(const ProbePlan& plan) {
  std::vector<std::unique_ptr<CacheReader>> caches;
  for (const auto& path : plan.options.caches) caches.push_back(std::make_unique<CacheReader>(path));
  if (caches.empty()) throw UsageError(OptionName{"cache"}, "at least one cache is needed");
  check_caches_for_task(caches, plan.task);
  // Each head of the grid on its level set, as build_grid will configure it: shapes come from
  // the cache, so a conv head on a vector level fails here rather than mid-study.
  const CacheReader& first = *caches.front();
  const bool pixel_values = plan.task == ProbeTask::kPixelRegression && first.label_kinds().has_pixel_value;
  const auto out_size = pixel_values ? first.pixel_value_shape() : first.mask_shape();  // as ProbeData
  for (const auto& c : plan.grid) configure_head(c.head, c.levels, first, out_size, /*outputs=*/0, plan);
}

namespace {

// k-NN votes and logreg fits are large matrix products: every core for them unless --threads
// says otherwise (LibTorch's default is one thread per physical core, under which the epochs of
// small heads run fastest, and k-NN ran twice as slow on a 2-vCPU machine). Restored after.
class EveryCore {
 public:
  explicit EveryCore(int threads_option) : before_(at::get_num_threads()) {
    if (threads_option == 0) use_intra_op_threads(usable_cpus());
  }
  ~EveryCore() { use_intra_op_threads(before_); }
  EveryCore(const EveryCore&) = delete;
  EveryCore& operator=(const EveryCore&) = delete;

 private:
  int before_;
};

// One train-probe run, step by step: options, the grid of banks, the data tier, standardisation,
// training with validation, test, outputs. Each step reads what the previous ones set.
class Trainer {
 public:
  Trainer(const ProbePlan& plan, const ProbeHooks& hooks)
      : plan(plan), options(plan.options), hooks(hooks), task(plan.task), device(plan.device) {}

  ProbeResult run() {
    parse();
    build_grid();
    choose_tier();
    standardize();
    if (knn()) {
      vote_knn();  // validation and test in one pass over the train split
      choose_best();
      return write_outputs();
    }
    if (plan.grid.front().head == HeadType::kLogreg) {
      fit_logregs();
    } else {
      train();
    }
    test();
    return write_outputs();
  }

 private:
  void parse() {
    t_start = Clock::now();
    // The plain interpreter: same numbers on every call (no profiling-driven re-optimisation).
    torch::jit::setGraphExecutorOptimize(false);
    if (options.out.empty()) throw UsageError(OptionName{"out"}, "required (the run directory to write)");
    if (plan.grid.empty()) throw std::logic_error("train-probe: a plan without combinations");
    // --threads 0 keeps LibTorch's default, one thread per core of the machine, which ignores the
    // CPUs this process may run on: in a Slurm task's cpuset or under taskset it would run more
    // threads than those CPUs (libgomp then sleeps and wakes them around every parallel region).
    if (options.threads > 0) {
      use_intra_op_threads(options.threads);
    } else {
      use_intra_op_threads(std::min(at::get_num_threads(), usable_cpus()));
    }

    const bool fractions = std::any_of(plan.grid.begin(), plan.grid.end(), [](const ProbeCombination& c) { return c.train_fraction != 1; });
    data_ = std::make_unique<ProbeData>(options, task, fractions);
    // Not progress: shown with --quiet too (studies run their passes quietly).
    for (const auto& warning : data_->warnings()) std::fprintf(stderr, "embcache: warning: %s\n", warning.c_str());
  }

  // The fractions of the grid and its train groups; group_of[i] is combination i's group.
  std::vector<std::size_t> build_groups() {
    std::vector<std::size_t> group_of;
    std::map<std::pair<std::size_t, std::uint64_t>, std::size_t> index;
    const std::uint64_t pass_seed = plan.grid.front().seed;  // --seed-mode init: the first seed's order
    for (const auto& c : plan.grid) {
      std::size_t f = 0;
      while (f < fractions_.size() && fractions_[f].fraction != c.train_fraction) ++f;
      if (f == fractions_.size()) fractions_.push_back(fraction_rows_of(c.train_fraction));
      const std::uint64_t seed = plan.seed_mode == SeedMode::kInit ? pass_seed : c.seed;
      const auto [it, fresh] = index.try_emplace({f, seed}, groups_.size());
      if (fresh) groups_.push_back(TrainGroup{f, seed, {}});
      group_of.push_back(it->second);
    }
    return group_of;
  }

  FractionRows fraction_rows_of(double fraction) const {
    FractionRows f;
    f.fraction = fraction;
    if (fraction != 1) f.rows = fraction_rows(data_->train_row_keys(), fraction);
    f.train_rows = fraction == 1 ? data_->train().size() : std::int64_t(f.rows.size());
    f.class_weights = train_class_weights(*data_, plan.class_weights, f.rows);
    if (f.class_weights.weights.defined()) f.loss_weights = f.class_weights.weights.to(device);
    return f;
  }

  // Later passes of the train feed visit fraction f's rows.
  void use_fraction(std::size_t f) {
    if (current_fraction_ == f) return;
    train_feed->restrict_rows(fractions_[f].rows);
    current_fraction_ = f;
  }

  // One head configuration per distinct (head, level set) of the grid, in the grid's order.
  std::vector<HeadConfig> configure_grid(std::vector<std::size_t>& config_of) {
    ProbeData& data = *data_;
    std::vector<HeadConfig> configs;
    std::vector<std::string> keys;
    std::map<std::string, bool> level_pooled;  // pooled only while every head reading it pools
    for (const auto& c : plan.grid) {
      const std::string key = std::string(head_name(c.head)) + "|" + c.levels_text();
      const auto found = std::find(keys.begin(), keys.end(), key);
      config_of.push_back(std::size_t(found - keys.begin()));
      if (found != keys.end()) continue;
      keys.push_back(key);
      configs.push_back(configure_head(c.head, c.levels, *data.caches().front(), data.mask_shape(), data.num_outputs(), plan));
      for (const auto& name : configs.back().levels) {
        auto it = level_pooled.find(name);
        level_pooled[name] = (it == level_pooled.end() ? true : it->second) && configs.back().pooled_input();
      }
    }
    for (const auto& [name, pooled] : level_pooled) {
      column_of[name] = columns.size();
      columns.push_back(level_column(data, data.level(name), pooled, plan.temporal_pool));
    }
    if (is_dense(task)) columns.push_back(mask_column(data));
    return configs;
  }

  // The grid, grouped into banks: the combinations of one bankable configuration in one train
  // group share a bank; the others get one each. Combination i is plan.grid[i].
  void build_grid() {
    std::vector<std::size_t> config_of;
    const std::vector<HeadConfig> configs = configure_grid(config_of);
    const std::vector<std::size_t> group_of = build_groups();
    std::map<std::pair<std::size_t, std::size_t>, std::size_t> shared;  // (config, group) -> bank
    std::vector<std::vector<std::uint64_t>> member_seeds;
    std::vector<std::size_t> bank_config, bank_group, bank_of;
    for (std::size_t i = 0; i < plan.grid.size(); ++i) {
      const std::size_t k = config_of[i], g = group_of[i];
      const auto found = configs[k].bankable() ? shared.find({k, g}) : shared.end();
      std::size_t b = found == shared.end() ? member_seeds.size() : found->second;
      if (found == shared.end()) {
        member_seeds.emplace_back();
        bank_config.push_back(k);
        bank_group.push_back(g);
        groups_[g].banks.push_back(b);
        if (configs[k].bankable()) shared[{k, g}] = b;
      }
      member_seeds[b].push_back(plan.grid[i].seed);
      bank_of.push_back(b);
    }
    for (std::size_t b = 0; b < member_seeds.size(); ++b) {
      const HeadConfig& config = configs[bank_config[b]];
      Bank bank{HeadBank(config, member_seeds[b], groups_[bank_group[b]].seed, device), {}, {}, nullptr};
      for (const auto& name : config.levels) bank.inputs.push_back(column_of.at(name));
      banks.push_back(std::move(bank));
    }
    const bool seeds = grid_seed_count(plan.grid) > 1;
    const bool fractions = fractions_.size() > 1 || fractions_.front().fraction != 1;
    for (std::size_t i = 0; i < plan.grid.size(); ++i) {
      const ProbeCombination& p = plan.grid[i];
      const HeadConfig& config = configs[config_of[i]];
      Combination c;
      c.head = config;
      c.levels_requested = p.levels_text();
      c.lr = p.lr;
      c.weight_decay = p.weight_decay;
      c.C = p.C;
      c.k = p.k;
      c.train_fraction = p.train_fraction;
      c.seed = p.seed;
      c.group = group_of[i];
      c.bank = bank_of[i];
      c.member = std::int64_t(banks[c.bank].combos.size());
      c.point = std::string(head_name(config.type)) + " levels=" + config.levels_text() +
                (config.type == HeadType::kLogreg ? " C=" + format_number(c.C)
                 : config.type == HeadType::kKnn  ? " k=" + std::to_string(c.k)
                                                  : " lr=" + format_number(c.lr) + " wd=" + format_number(c.weight_decay)) +
                (fractions ? " fraction=" + format_number(c.train_fraction) : "");
      c.id = c.point + (seeds ? " seed=" + std::to_string(c.seed) : "");
      banks[c.bank].combos.push_back(combos.size());
      combos.push_back(std::move(c));
    }
    for (auto& bank : banks) {
      std::vector<double> lr, wd;
      for (auto ci : bank.combos) {
        lr.push_back(combos[ci].lr);
        wd.push_back(combos[ci].weight_decay);
      }
      bank.optimizer = std::make_unique<BankOptimizer>(plan.optimizer, bank.heads.parameters(), lr, wd);
    }
  }

  const FractionRows& fraction_of(const Combination& c) const { return fractions_[groups_[c.group].fraction]; }

  void choose_tier() {
    ProbeData& data = *data_;
    TierInputs in;
    in.request = plan.tier;
    in.cuda = device.is_cuda();
    in.row_bytes = resident_row_bytes(columns);
    in.rows = data.train().size() + data.val().size() + data.test().size();
    in.val_rows = data.val().size();
    in.batch_size = plan.batch_size;
    in.host_budget = plan.host_budget.value_or(available_host_bytes() / 2);
    if (device.is_cuda()) {
      const std::int64_t free = free_gpu_bytes(device.index() < 0 ? 0 : device.index());
      in.gpu_budget = plan.gpu_budget.value_or(free > 0 ? free / 2 : 0);
    }
    const TierChoice choice = embcache::choose_tier(in);
    tier = choice.tier;
    val_tier = choice.val_tier;
    needed = choice.needed;
    host_budget = in.host_budget;
    gpu_budget = in.gpu_budget;
    buffer_bytes = choice.buffer_bytes;
    // k-NN reads the train split in blocks against every query: large blocks, fewer merges,
    // where the features are resident (a stream keeps the batches its budget allows).
    const std::int64_t batch_size =
        knn() && tier != FeedTier::kStream ? std::max<std::int64_t>(plan.batch_size, 4096) : plan.batch_size;
    const auto t_load = Clock::now();
    train_feed = std::make_unique<FeatureFeed>(data, 0, columns, tier, device, batch_size, buffer_bytes);
    val_feed = std::make_unique<FeatureFeed>(data, 1, columns, val_tier, device, batch_size, buffer_bytes);
    if (data.test().size() > 0) test_feed = std::make_unique<FeatureFeed>(data, 2, columns, tier, device, batch_size, buffer_bytes);
    load_seconds = seconds_since(t_load);
  }

  // Per-channel statistics from the train rows each bank trains on (its fraction's).
  void standardize() {
    for (std::size_t f = 0; f < fractions_.size(); ++f) {
      std::vector<std::size_t> mine;
      for (const auto& group : groups_) {
        if (group.fraction != f) continue;
        for (auto b : group.banks) {
          if (banks[b].heads.config().standardize) mine.push_back(b);
        }
      }
      if (!mine.empty()) standardize_banks(f, mine);
    }
  }

  void standardize_banks(std::size_t fraction, const std::vector<std::size_t>& mine) {
    std::map<std::string, ChannelStats> stats;  // key: level + "/pooled" or "/map"
    use_fraction(fraction);
    train_feed->start(false, 0);
    while (auto batch = train_feed->next()) {
      std::set<std::string> added;  // a (level, view) read by several banks counts once
      for (auto b : mine) {
        const HeadConfig& config = banks[b].heads.config();
        for (std::size_t i = 0; i < config.levels.size(); ++i) {
          const at::Tensor& x = batch->columns[banks[b].inputs[i]];
          const bool pooled = config.pooled_input();
          const std::string key = config.levels[i] + (pooled ? "/pooled" : "/map");
          if (!added.insert(key).second) continue;
          stats[key].add(pooled && x.dim() == 4 ? x.mean({2, 3}) : x);
        }
      }
    }
    for (auto b : mine) {
      const HeadConfig& config = banks[b].heads.config();
      std::vector<at::Tensor> mean, std;
      for (const auto& level : config.levels) {
        const auto [m, s] = stats.at(level + (config.pooled_input() ? "/pooled" : "/map")).mean_std();
        mean.push_back(m);
        std.push_back(s);
      }
      banks[b].heads.set_standardization(mean, std);
    }
  }

  void train() {
    threads_ = at::get_num_threads();
    // Banks side by side on the cores the intra-op threads leave free (probe/bank_lanes.hpp).
    const std::size_t lane_count = hooks.bank_lanes > 0 ? hooks.bank_lanes
                                                        : bank_lane_count(device, at::get_num_threads(),
                                                                          std::size_t(usable_cpus()));
    if (lane_count > 1 && banks.size() > 1) {
      lanes_.emplace(std::min(lane_count, banks.size()), at::get_num_threads());
    }
    higher = higher_is_better(task);
    primary = primary_metric(task);
    history = nlohmann::json::array();
    wait_before_training = train_feed->stats().wait_seconds;  // the stats pass waits too
    std::int64_t steps_per_epoch = 0;
    for (auto& group : groups_) {
      use_fraction(group.fraction);
      group.steps_per_epoch = train_feed->batches_per_epoch();
      group.total_steps = group.steps_per_epoch * options.epochs;
      group.warmup_steps = std::int64_t(std::llround(options.warmup_epochs * double(group.steps_per_epoch)));
      steps_per_epoch += group.steps_per_epoch;
    }
    for (std::int64_t epoch = 1; epoch <= options.epochs; ++epoch) {
      const auto t_epoch = Clock::now();
      Progress progress("epoch " + std::to_string(epoch) + "/" + std::to_string(options.epochs), steps_per_epoch,
                        options.quiet ? Progress::Mode::kQuiet : Progress::Mode::kAuto);
      std::vector<at::Tensor> loss_sum;
      for (const auto& bank : banks) loss_sum.push_back(at::zeros({bank.heads.members()}, at::TensorOptions().dtype(at::kDouble).device(device)));
      std::vector<std::int64_t> seen(groups_.size(), 0);
      std::int64_t done = 0;
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        seen[g] = train_group(groups_[g], epoch, loss_sum, [&] { progress.update(++done); });
        samples_trained += seen[g];
      }
      progress.finish();
      train_seconds += seconds_since(t_epoch);
      ++epochs_run;

      // Validation, early stopping, history.
      if (!validate_epoch(epoch, loss_sum, seen, t_epoch)) break;
    }
  }

  // Validation after an epoch: best states, early stopping, divergence and the history rows.
  // Returns whether any combination is still training.
  bool validate_epoch(std::int64_t epoch, const std::vector<at::Tensor>& loss_sum, const std::vector<std::int64_t>& seen,
                      Clock::time_point t_epoch) {
    const ProbeData& data = *data_;
    auto val = evaluate(banks, *val_feed, data);
    const double epoch_seconds = seconds_since(t_epoch);
    bool any_active = false;
    for (std::size_t i = 0; i < banks.size(); ++i) {
      const std::size_t in_group = combos[banks[i].combos.front()].group;
      const TrainGroup& group = groups_[in_group];
      const at::Tensor mean_loss = (loss_sum[i] / double(std::max<std::int64_t>(1, seen[in_group]))).cpu();
      for (std::int64_t g = 0; g < banks[i].heads.members(); ++g) {
        Combination& c = combos[banks[i].combos[g]];
        if (!c.active) continue;
        const double loss = mean_loss[g].item<double>();
        if (!std::isfinite(loss)) {
          // One diverging learning rate of a sweep must not cost the others: this combination
          // stops, and keeps its best epoch before the divergence if it had one.
          c.active = false;
          c.diverged_epoch = epoch;
          warnings_.push_back(divergence(c) + (c.best_state.empty() ? "; it has no result"
                                                                    : "; its best epoch before that, " +
                                                                          std::to_string(c.best_epoch) + ", stays a candidate") +
                              "; lower its learning rate (or check the features for NaN)");
          continue;
        }
        nlohmann::json metrics = val[i].result(g);
        const double value = val[i].primary(g);
        const bool better = std::isnan(c.best_value) || (higher ? value > c.best_value : value < c.best_value);
        if (better && std::isfinite(value)) {
          c.best_value = value;
          c.best_epoch = epoch;
          c.best_val = metrics;
          c.best_state = banks[i].heads.member_state(g);
          c.epochs_since_best = 0;
        } else {
          ++c.epochs_since_best;
          if (options.patience > 0 && c.epochs_since_best >= options.patience) c.active = false;
        }
        any_active = any_active || c.active;
        nlohmann::json row = {{"epoch", epoch}, {"combination", c.id}, {"head", head_name(c.head.type)},
                              {"levels", c.head.levels_text()}, {"lr_base", c.lr}, {"weight_decay", c.weight_decay},
                              {"train_loss", loss},
                              {"lr", c.lr * schedule_factor(plan.schedule, std::max<std::int64_t>(0, group.step - 1),
                                                            group.total_steps, group.warmup_steps)},
                              {"train_fraction", c.train_fraction}, {"seed", c.seed},
                              {"seconds", epoch_seconds}};
        nlohmann::json scalars = nlohmann::json::object();
        for (const auto& [k, v] : metrics.items()) {
          if (v.is_number() || v.is_null()) scalars[k] = v;
        }
        row["val"] = scalars;
        history.push_back(row);
      }
    }
    return any_active;
  }

  // The next `limit` batches of the train feed (fewer at the end of the pass) and their schedule
  // factors; false when the pass has none left.
  bool next_window(const TrainGroup& group, std::size_t limit, std::vector<FeedBatch>& window,
                   std::vector<double>& factors) {
    window.clear();
    factors.clear();
    while (window.size() < limit) {
      auto batch = train_feed->next();
      if (!batch) break;
      if (stop_requested()) throw Interrupted("train-probe interrupted; no results written");
      factors.push_back(schedule_factor(plan.schedule, group.step + std::int64_t(window.size()), group.total_steps,
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
      if (std::any_of(banks[b].combos.begin(), banks[b].combos.end(), [&](std::size_t ci) { return combos[ci].active; })) live.push_back(b);
    }
    if (live.empty()) return 0;
    const FractionRows& fraction = fractions_[group.fraction];
    use_fraction(group.fraction);
    std::int64_t seen = 0;
    train_feed->start(true, group.seed * 1000003ull + std::uint64_t(epoch));
    // Banks on lanes take a window of batches at once, each bank its batches in order, with no
    // barrier between batches (BankLanes::run_chains); otherwise one batch at a time.
    const bool side_by_side = lanes_ && live.size() > 1;
    const std::size_t window_batches = side_by_side ? kLaneWindowBatches : 1;
    std::vector<FeedBatch> window;
    std::vector<double> factors;
    const auto step = [&](std::size_t k, std::size_t t) {
      Bank& bank = banks[live[k]];
      std::vector<bool> active;
      for (auto ci : bank.combos) active.push_back(combos[ci].active);
      const FeedBatch& batch = window[t];
      const at::Tensor out = bank.heads.forward(bank_inputs(bank, batch), true);
      const at::Tensor losses =
          member_losses(task, out, batch, data_->ignore_index(), options.label_smoothing, fraction.loss_weights);
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

  // --head logreg: the training split's pooled, standardised features once, then each bank's
  // members (one per C) fitted by L-BFGS in increasing C, each starting from the previous
  // solution; the fit counts as epoch 1.
  void fit_logregs() {
    const auto t0 = Clock::now();
    const EveryCore cores(options.threads);
    threads_ = at::get_num_threads();
    history = nlohmann::json::array();
    higher = higher_is_better(task);
    primary = primary_metric(task);
    std::vector<std::vector<LogregFit>> fits(banks.size());
    for (const auto& group : groups_) {
      at::Tensor y;
      std::vector<at::Tensor> features;
      use_fraction(group.fraction);
      {
        c10::NoGradGuard no_grad;
        features = pooled_split(*train_feed, &y, false, group.banks);
      }
      for (std::size_t j = 0; j < group.banks.size(); ++j) {
        const at::Tensor z = features[j].to(at::kDouble);
        features[j] = at::Tensor();
        fits[group.banks[j]] = fit_logreg_path(banks[group.banks[j]], z, y, fractions_[group.fraction].loss_weights);
      }
      samples_trained += y.size(0);
    }
    train_seconds = seconds_since(t0);
    epochs_run = 1;
    record_fits(fits);
  }

  // One bank's members (one per C) fitted in increasing C, each from the previous solution.
  std::vector<LogregFit> fit_logreg_path(Bank& bank, const at::Tensor& z, const at::Tensor& y, const at::Tensor& weights) {
    std::vector<std::int64_t> order(std::size_t(bank.heads.members()));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return combos[bank.combos[std::size_t(a)]].C < combos[bank.combos[std::size_t(b)]].C;
    });
    std::vector<LogregFit> fits(order.size());
    const LogregFit* previous = nullptr;
    for (std::int64_t g : order) {
      if (stop_requested()) throw Interrupted("train-probe interrupted; no results written");
      LogregFit& fit = fits[std::size_t(g)];
      fit = fit_logreg(z, y, data_->num_outputs(), combos[bank.combos[std::size_t(g)]].C, weights, previous);
      bank.heads.load_member_state(g, {fit.weight.to(at::kFloat), fit.bias.to(at::kFloat)});
      previous = &fit;
    }
    return fits;
  }

  // Validation of the fitted members, as one epoch: every C is a result row.
  void record_fits(const std::vector<std::vector<LogregFit>>& fits) {
    auto val = evaluate(banks, *val_feed, *data_);
    for (std::size_t i = 0; i < banks.size(); ++i) {
      for (std::int64_t g = 0; g < banks[i].heads.members(); ++g) {
        Combination& c = combos[banks[i].combos[std::size_t(g)]];
        const LogregFit& fit = fits[i][std::size_t(g)];
        c.best_epoch = 1;
        c.best_value = val[i].primary(g);
        c.best_val = val[i].result(g);
        c.best_state = banks[i].heads.member_state(g);
        nlohmann::json row = {{"epoch", 1}, {"combination", c.id}, {"head", head_name(c.head.type)},
                              {"levels", c.head.levels_text()}, {"lr_base", 0.0}, {"weight_decay", 0.0}, {"C", c.C},
                              {"train_loss", fit.loss}, {"train_fraction", c.train_fraction}, {"seed", c.seed},
                              {"evaluations", fit.evaluations}, {"seconds", train_seconds}};
        nlohmann::json scalars = nlohmann::json::object();
        for (const auto& [k, v] : c.best_val.items()) {
          if (v.is_number() || v.is_null()) scalars[k] = v;
        }
        row["val"] = scalars;
        history.push_back(row);
      }
    }
  }

  bool knn() const { return plan.grid.front().head == HeadType::kKnn; }

  // One split's pooled features per bank, as the bank's first layer reads them (L2-normalised
  // when `normalize`), and its targets, in row order: what logreg fits and k-NN queries with.
  // `of`: those banks, in that order (default: every bank).
  std::vector<at::Tensor> pooled_split(FeatureFeed& feed, at::Tensor* targets, bool normalize, std::vector<std::size_t> of = {}) {
    if (of.empty()) {
      for (std::size_t i = 0; i < banks.size(); ++i) of.push_back(i);
    }
    std::vector<std::vector<at::Tensor>> parts(of.size());
    std::vector<at::Tensor> ys;
    feed.start(false, 0);
    while (auto batch = feed.next()) {
      for (std::size_t j = 0; j < of.size(); ++j) {
        const at::Tensor z = banks[of[j]].heads.pooled_features(bank_inputs(banks[of[j]], *batch));
        parts[j].push_back(normalize ? l2_normalize(z) : z);
      }
      ys.push_back(batch->targets);
    }
    *targets = ys.empty() ? at::empty({0}, at::kLong) : at::cat(ys);
    std::vector<at::Tensor> out;
    for (auto& p : parts) out.push_back(p.empty() ? at::Tensor() : at::cat(p));
    return out;
  }

  // --head knn: val and test rows are the queries; one pass over the train split keeps each
  // query's k_max nearest rows (blocks of train rows, so the train split is never whole in
  // memory unless its tier holds it anyway), and every k of the grid votes from them.
  void vote_knn() {
    c10::NoGradGuard no_grad;
    ProbeData& data = *data_;
    const auto t0 = Clock::now();
    const EveryCore cores(options.threads);
    threads_ = at::get_num_threads();
    higher = higher_is_better(task);
    primary = primary_metric(task);
    at::Tensor y_val, y_test;
    const std::vector<at::Tensor> val = pooled_split(*val_feed, &y_val, true);
    std::vector<at::Tensor> test;
    if (test_feed) test = pooled_split(*test_feed, &y_test, true);
    std::vector<KnnNeighbours> neighbours;
    for (std::size_t i = 0; i < banks.size(); ++i) {
      neighbours.emplace_back(test_feed ? at::cat({val[i], test[i]}) : val[i], knn_k_max(i));
    }
    // The train bank is kept for head.pt where the tier holds the train split anyway.
    const bool keep = tier != FeedTier::kStream;
    knn_banks_.assign(banks.size(), at::Tensor());
    knn_labels_.assign(fractions_.size(), at::Tensor());
    for (const auto& group : groups_) {
      check_knn_k(group);
      use_fraction(group.fraction);
      std::vector<std::vector<at::Tensor>> bank(banks.size());
      std::vector<at::Tensor> bank_labels;
      train_feed->start(false, 0);
      while (auto batch = train_feed->next()) {
        for (auto i : group.banks) {
          const at::Tensor t = l2_normalize(banks[i].heads.pooled_features(bank_inputs(banks[i], *batch)));
          neighbours[i].add(t, batch->targets);
          if (keep) bank[i].push_back(t);
        }
        if (keep) bank_labels.push_back(batch->targets);
      }
      for (auto i : group.banks) {
        if (keep) knn_banks_[i] = at::cat(bank[i]);
      }
      if (keep) knn_labels_[group.fraction] = at::cat(bank_labels);
      samples_trained += fractions_[group.fraction].train_rows;
    }
    if (!keep) {
      warnings_.push_back("no head.pt: a k-NN head holds the train split, which did not fit the memory budget and was "
                          "streamed; raise --host-memory-budget to export it");
    }
    const std::int64_t n_val = y_val.size(0);
    for (auto& c : combos) {
      const at::Tensor scores = neighbours[c.bank].scores(c.k, data.num_outputs(), options.knn_temperature);
      MetricAccumulator v(task, data.num_outputs(), data.ignore_index(), 1);
      v.add(scores.narrow(0, 0, n_val).unsqueeze(0), y_val);
      c.best_epoch = 1;
      c.best_value = v.primary(0);
      c.best_val = v.result(0);
      if (test_feed) {
        MetricAccumulator t(task, data.num_outputs(), data.ignore_index(), 1);
        t.add(scores.narrow(0, n_val, y_test.size(0)).unsqueeze(0), y_test);
        c.test = t.result(0);
        if (options.bootstrap > 0) c.test_ci = t.bootstrap(0, options.bootstrap, c.seed);
      }
      nlohmann::json scalars = nlohmann::json::object();
      for (const auto& [key, value] : c.best_val.items()) {
        if (value.is_number() || value.is_null()) scalars[key] = value;
      }
      history.push_back({{"epoch", 1}, {"combination", c.id}, {"head", "knn"}, {"levels", c.head.levels_text()},
                         {"lr_base", 0.0}, {"weight_decay", 0.0}, {"k", c.k}, {"train_loss", 0.0},
                         {"train_fraction", c.train_fraction}, {"seed", c.seed},
                         {"seconds", seconds_since(t0)}, {"val", scalars}});
    }
    train_seconds = seconds_since(t0);
    epochs_run = 1;
  }

  std::int64_t knn_k_max(std::size_t bank) const {
    std::int64_t k_max = 0;
    for (auto ci : banks[bank].combos) k_max = std::max(k_max, combos[ci].k);
    return k_max;
  }

  // Every k must find as many train rows (of its fraction).
  void check_knn_k(const TrainGroup& group) const {
    const FractionRows& f = fractions_[group.fraction];
    for (auto b : group.banks) {
      const std::int64_t k = knn_k_max(b);
      if (k <= f.train_rows) continue;
      throw UsageError(OptionName{"k"}, std::to_string(k) + " is larger than the train split ('" + data_->train().name + "', " +
                       std::to_string(f.train_rows) + " rows" +
                       (f.fraction != 1 ? " at --train-fraction " + format_number(f.fraction) : std::string()) +
                       "); use a smaller --k");
    }
  }

  // Writes combination c's head.pt (valid while the trainer lives).
  std::function<void(const std::string&)> head_saver(const Combination& c) const {
    if (c.head.type == HeadType::kKnn) {
      if (!knn_banks_.at(c.bank).defined()) return {};  // streamed: no head.pt (vote_knn warned)
      const at::Tensor& features = knn_banks_[c.bank];
      const at::Tensor& labels = knn_labels_.at(groups_[c.group].fraction);
      const std::int64_t k = c.k, classes = data_->num_outputs();
      const double temperature = options.knn_temperature;
      return [&features, &labels, k, classes, temperature](const std::string& path) {
        save_knn_head(path, features, labels, k, classes, temperature);
      };
    }
    const HeadBank& bank = banks[c.bank].heads;
    const std::int64_t member = c.member;
    return [&bank, member](const std::string& path) { bank.save_member(member, path); };
  }

  void test() {
    ProbeData& data = *data_;
    // Best states back in, test for every combination, the best one picked by validation.
    for (auto& c : combos) {
      if (!c.best_state.empty()) banks[c.bank].heads.load_member_state(c.member, c.best_state);
    }
    if (std::all_of(combos.begin(), combos.end(), [](const Combination& c) { return c.diverged_epoch > 0 && c.best_state.empty(); })) {
      throw InputError(divergence(combos.front()) + (combos.size() > 1 ? ", and every other combination diverged too" : "") +
                       "; lower the learning rate (or check the features for NaN)");
    }
    choose_best();
    if (test_feed) {
      auto test = evaluate(banks, *test_feed, data);
      for (auto& c : combos) {
        if (c.best_state.empty()) continue;  // diverged before its first finite epoch: its weights are not finite
        c.test = test[c.bank].result(c.member);
        // Intervals for every combination: resampling reuses the per-image records, so it is cheap.
        if (options.bootstrap > 0) c.test_ci = test[c.bank].bootstrap(c.member, options.bootstrap, c.seed);
      }
    }
  }

  // The combination with the best validation metric (warnings shown first, once training has a
  // result: an error is one line; with --quiet too, like the data's).
  void choose_best() {
    const ProbeData& data = *data_;
    for (const auto& warning : warnings_) std::fprintf(stderr, "embcache: warning: %s\n", warning.c_str());
    // With several seeds a combination is judged by its mean over them (NaN when a seed has no
    // result); the pick is its first seed's head.
    std::map<std::string, std::pair<double, std::int64_t>> sums;  // point -> (sum, seeds)
    for (const auto& c : combos) {
      auto& [sum, n] = sums[c.point];
      sum += c.best_value;
      ++n;
    }
    auto value = [&](const Combination& c) { return sums[c.point].first / double(sums[c.point].second); };
    best = 0;
    for (std::size_t i = 0; i < combos.size(); ++i) {
      const double v = value(combos[i]), b = value(combos[best]);
      if (std::isnan(b) || (std::isfinite(v) && (higher ? v > b : v < b))) best = i;
    }
    if (std::isnan(combos[best].best_value)) {
      throw InputError("no combination produced a finite validation " + primary + "; check the labels of split '" +
                       data.val().name + "'");
    }
  }

  CombinationResult result_of(const Combination& c) const {
    // Every field, in CombinationResult's order.
    return CombinationResult{c.id, head_name(c.head.type), c.head.levels, c.lr, c.weight_decay, c.best_epoch,
                             c.diverged_epoch, c.best_value, c.best_val, c.test, c.test_ci, c.C, c.k, c.point, c.seed,
                             c.train_fraction, fraction_of(c).train_rows};
  }

  // How the features were fed: the three splits' feeds together, the tiers and the budgets.
  nlohmann::json data_json() const {
    FeedStats total = train_feed->stats();
    for (const FeatureFeed* f : {val_feed.get(), test_feed.get()}) {
      if (!f) continue;
      const FeedStats& s = f->stats();
      total.bytes_resident += s.bytes_resident;
      total.bytes_read += s.bytes_read;
      total.read_seconds += s.read_seconds;
      total.rows_read += s.rows_read;
      total.rows_used += s.rows_used;
    }
    nlohmann::json j = total.to_json(tier);
    j["wait_fraction"] = train_seconds > 0 ? (train_feed->stats().wait_seconds - wait_before_training) / train_seconds : 0.0;
    j["host_memory_budget"] = host_budget;
    j["val_tier"] = tier_name(val_tier);
    if (device.is_cuda()) j["gpu_memory_budget"] = gpu_budget;
    j["bytes_needed_resident"] = needed;
    j["peak_rss_bytes"] = peak_rss_bytes();
    return j;
  }

  RunFacts run_facts() const {
    const ProbeData& data = *data_;
    RunFacts facts;
    facts.options = resolved_options_json(plan);
    facts.task = task_name(task);
    facts.num_outputs = data.num_outputs();
    facts.class_names = data.caches().front()->label_kinds().class_names;
    facts.primary_metric = primary;
    facts.splits = {{"train", {{"name", data.train().name}, {"rows", data.train().size()}}},
                    {"val", {{"name", data.val().name}, {"rows", data.val().size()}}},
                    {"test", {{"name", data.test().name}, {"rows", data.test().size()}}}};
    facts.device = device.str();
    facts.history = history;
    facts.timing = {{"train_seconds", train_seconds}, {"load_seconds", load_seconds}, {"total_seconds", seconds_since(t_start)},
                    {"epochs", epochs_run}, {"samples_per_second", train_seconds > 0 ? double(samples_trained) / train_seconds : 0.0},
                    {"heads", combos.size()}, {"banks", banks.size()}, {"bank_lanes", lanes_ ? lanes_->lanes() : 1},
                    {"threads", threads_}};
    facts.data = data_json();
    if (plan.class_weights != ClassWeightMode::kNone) {
      // One fraction: as before fractions existed; several: one object per fraction.
      for (const auto& f : fractions_) {
        nlohmann::json j = f.class_weights.to_json();
        if (fractions_.size() == 1) {
          facts.class_weights = j;
        } else {
          j["train_fraction"] = f.fraction;
          facts.class_weights.push_back(j);
        }
      }
    }
    facts.warnings = data.warnings();
    facts.warnings.insert(facts.warnings.end(), warnings_.begin(), warnings_.end());
    return facts;
  }

  // Each combination's outcome, by its index in the plan's grid (a study writes a run of each).
  void report_combinations(const nlohmann::json& metrics, const std::vector<CombinationResult>& results) const {
    if (!hooks.on_combination) return;
    for (std::size_t i = 0; i < combos.size(); ++i) {
      const Combination& c = combos[i];
      CombinationOutcome outcome;
      outcome.index = i;
      outcome.id = c.id;
      outcome.head = head_name(c.head.type);
      outcome.levels = c.head.levels;
      outcome.levels_requested = c.levels_requested;
      outcome.lr = c.lr;
      outcome.weight_decay = c.weight_decay;
      outcome.C = c.C;
      outcome.k = c.k;
      outcome.seed = c.seed;
      outcome.train_fraction = c.train_fraction;
      outcome.train_rows = fraction_of(c).train_rows;
      outcome.best_epoch = c.best_epoch;
      outcome.diverged_epoch = c.diverged_epoch;
      outcome.val = metrics["combinations"][i]["val"];
      outcome.test = metrics["combinations"][i]["test"];
      outcome.test_ci95 = results[i].test_ci95;
      outcome.best = i == best;
      outcome.run_metrics = &metrics;
      outcome.history = nlohmann::json::array();
      for (const auto& row : history) {
        if (row["combination"] == c.id) outcome.history.push_back(row);
      }
      outcome.save_head = head_saver(c);
      hooks.on_combination(outcome);
    }
  }

  ProbeResult write_outputs() {
    std::vector<CombinationResult> results;
    for (const auto& c : combos) results.push_back(result_of(c));
    const nlohmann::json metrics = metrics_json(run_facts(), results, best);
    write_run_dir(options.out, metrics, head_saver(combos[best]));
    report_combinations(metrics, results);
    return {metrics, run_summary_line(metrics, results[best], epochs_run, train_seconds, options.out)};
  }

  const ProbePlan& plan;
  const ProbeOptions& options;  // plan.options: its numbers, paths and split names
  const ProbeHooks& hooks;
  std::vector<std::string> warnings_;  // of the training itself (diverged combinations)
  Clock::time_point t_start;
  const ProbeTask task;
  const c10::Device device;
  std::unique_ptr<ProbeData> data_;
  std::vector<FractionRows> fractions_;  // --train-fraction, in the grid's order
  std::vector<TrainGroup> groups_;
  std::size_t current_fraction_ = std::numeric_limits<std::size_t>::max();  // the train feed's rows
  std::vector<at::Tensor> knn_banks_;   // knn: the train rows' normalised features per bank (unless streamed)
  std::vector<at::Tensor> knn_labels_;  // knn: their labels per fraction
  // The grid.
  std::vector<Combination> combos;
  std::vector<Bank> banks;
  std::vector<FeedColumn> columns;
  std::map<std::string, std::size_t> column_of;
  // The data tier.
  std::int64_t needed = 0, host_budget = 0, gpu_budget = 0, buffer_bytes = 0;
  FeedTier tier = FeedTier::kHost;
  FeedTier val_tier = FeedTier::kHost;  // the tier, or host when streaming keeps val in memory
  std::unique_ptr<FeatureFeed> train_feed, val_feed, test_feed;
  double load_seconds = 0;
  // Training.
  std::optional<BankLanes> lanes_;  // when banks train side by side
  int threads_ = 0;                  // LibTorch's intra-op threads while the heads trained or fitted
  std::int64_t epochs_run = 0, samples_trained = 0;
  bool higher = true;
  std::string primary;
  nlohmann::json history = nlohmann::json::array();
  double train_seconds = 0, wait_before_training = 0;
  std::size_t best = 0;
};

}  // namespace

ProbeResult train_probe(const ProbePlan& plan, const ProbeHooks& hooks) {
  // The feed's producer thread allocates every block the trainer frees: with glibc's defaults
  // (a heap per thread, trimmed when its top is free; large blocks mmapped) the heads' batches
  // were page-faulted anew, and the stream tier over a cache of 16 parts ran at 0.19-0.7x the
  // speed of one file (docs/scale-out.md, "Figures"). One arena that keeps its memory, as
  // precompute's encoder gets; the stream tier's memory stays bounded by its budget.
  const EncoderAllocatorScope allocator;
  return Trainer(plan, hooks).run();
}

}  // namespace embcache
