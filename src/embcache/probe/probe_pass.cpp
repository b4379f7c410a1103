#include "embcache/probe/probe_pass.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "embcache/core/error.hpp"
#include "embcache/host/memory_info.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/core/stop_request.hpp"
#include "embcache/probe/knn.hpp"
#include "embcache/probe/tier_choice.hpp"

namespace embcache {
namespace {

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

std::string divergence(const Combination& c) {
  return "training diverged: the loss of " + c.result.id + " is not finite in epoch " +
         std::to_string(c.result.diverged_epoch);
}

}  // namespace

nlohmann::json scalar_metrics(const nlohmann::json& metrics) {
  nlohmann::json scalars = nlohmann::json::object();
  for (const auto& [key, value] : metrics.items()) {
    if (value.is_number() || value.is_null()) scalars[key] = value;
  }
  return scalars;
}

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

ProbePass::ProbePass(const ProbePlan& plan)
    : plan(plan), options(plan.options), task(plan.task), device(plan.device), higher(higher_is_better(plan.task)),
      primary(primary_metric(plan.task)) {
  open_data();
  build_grid();
  choose_tier();
  standardize();
}

ProbePass::~ProbePass() = default;

void ProbePass::open_data() {
  t_start = Clock::now();
  if (options.out.empty()) throw UsageError(OptionName{"out"}, "required (the run directory to write)");
  if (plan.grid.empty()) throw std::logic_error("train-probe: a plan without combinations");
  const bool fractions_asked = std::any_of(plan.grid.begin(), plan.grid.end(),
                                           [](const ProbeCombination& c) { return c.train_fraction != 1; });
  data = std::make_unique<ProbeData>(options, task, fractions_asked);
  // Not progress: shown with --quiet too (studies run their passes quietly).
  for (const auto& warning : data->warnings()) std::fprintf(stderr, "embcache: warning: %s\n", warning.c_str());
}

// The fractions of the grid and its train groups; group_of[i] is combination i's group.
std::vector<std::size_t> ProbePass::build_groups() {
  std::vector<std::size_t> group_of;
  std::map<std::pair<std::size_t, std::uint64_t>, std::size_t> index;
  const std::uint64_t pass_seed = plan.grid.front().seed;  // --seed-mode init: the first seed's order
  for (const auto& c : plan.grid) {
    std::size_t f = 0;
    while (f < fractions.size() && fractions[f].fraction != c.train_fraction) ++f;
    if (f == fractions.size()) fractions.push_back(fraction_rows_of(c.train_fraction));
    const std::uint64_t seed = plan.seed_mode == SeedMode::kInit ? pass_seed : c.seed;
    const auto [it, fresh] = index.try_emplace({f, seed}, groups.size());
    if (fresh) groups.push_back(TrainGroup{f, seed, {}});
    group_of.push_back(it->second);
  }
  return group_of;
}

FractionRows ProbePass::fraction_rows_of(double fraction) const {
  FractionRows f;
  f.fraction = fraction;
  if (fraction != 1) f.rows = fraction_rows(data->train_row_keys(), fraction);
  f.train_rows = fraction == 1 ? data->train().size() : std::int64_t(f.rows.size());
  f.class_weights = train_class_weights(*data, plan.class_weights, f.rows);
  if (f.class_weights.weights.defined()) f.loss_weights = f.class_weights.weights.to(device);
  return f;
}

void ProbePass::use_fraction(std::size_t f) {
  if (current_fraction_ == f) return;
  train_feed->restrict_rows(fractions[f].rows);
  current_fraction_ = f;
}

// One head configuration per distinct (head, level set) of the grid, in the grid's order; and
// the feed's columns: each level once, pooled only while every head reading it pools.
std::vector<HeadConfig> ProbePass::configure_grid(std::vector<std::size_t>& config_of) {
  std::vector<HeadConfig> configs;
  std::vector<std::string> keys;
  std::map<std::string, bool> level_pooled;
  for (const auto& c : plan.grid) {
    const std::string key = std::string(head_name(c.head)) + "|" + c.levels_text();
    const auto found = std::find(keys.begin(), keys.end(), key);
    config_of.push_back(std::size_t(found - keys.begin()));
    if (found != keys.end()) continue;
    keys.push_back(key);
    configs.push_back(configure_head(c.head, c.levels, *data->caches().front(), data->mask_shape(), data->num_outputs(), plan));
    for (const auto& name : configs.back().levels) {
      auto it = level_pooled.find(name);
      level_pooled[name] = (it == level_pooled.end() ? true : it->second) && configs.back().pooled_input();
    }
  }
  for (const auto& [name, pooled] : level_pooled) {
    column_of[name] = columns.size();
    columns.push_back(level_column(*data, data->level(name), pooled, plan.temporal_pool));
  }
  if (is_dense(task)) columns.push_back(mask_column(*data));
  return configs;
}

// The grid, grouped into banks: the combinations of one bankable configuration in one train
// group share a bank; the others get one each. Combination i is plan.grid[i].
void ProbePass::build_grid() {
  std::vector<std::size_t> config_of;
  const std::vector<HeadConfig> configs = configure_grid(config_of);
  const std::vector<std::size_t> group_of = build_groups();
  build_banks(configs, config_of, group_of);
  name_combinations();
  for (auto& bank : banks) {
    std::vector<double> lr, wd;
    for (auto ci : bank.combos) {
      lr.push_back(combos[ci].point().lr);
      wd.push_back(combos[ci].point().weight_decay);
    }
    bank.optimizer = std::make_unique<BankOptimizer>(plan.optimizer, bank.heads.parameters(), lr, wd);
  }
}

void ProbePass::build_banks(const std::vector<HeadConfig>& configs, const std::vector<std::size_t>& config_of,
                            const std::vector<std::size_t>& group_of) {
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
      groups[g].banks.push_back(b);
      if (configs[k].bankable()) shared[{k, g}] = b;
    }
    member_seeds[b].push_back(plan.grid[i].seed);
    bank_of.push_back(b);
  }
  for (std::size_t b = 0; b < member_seeds.size(); ++b) {
    const HeadConfig& config = configs[bank_config[b]];
    Bank bank{HeadBank(config, member_seeds[b], groups[bank_group[b]].seed, device), {}, {}, nullptr};
    for (const auto& name : config.levels) bank.inputs.push_back(column_of.at(name));
    banks.push_back(std::move(bank));
  }
  for (std::size_t i = 0; i < plan.grid.size(); ++i) {
    Combination c;
    c.result.point = plan.grid[i];
    c.group = group_of[i];
    c.bank = bank_of[i];
    c.member = std::int64_t(banks[c.bank].combos.size());
    banks[c.bank].combos.push_back(combos.size());
    combos.push_back(std::move(c));
  }
}

// Each combination's id ("linear levels=2 lr=0.001 wd=0", with its fraction and seed where the
// grid has several), its level names and the rows of its fraction.
void ProbePass::name_combinations() {
  const bool seeds = grid_seed_count(plan.grid) > 1;
  const bool several_fractions = fractions.size() > 1 || fractions.front().fraction != 1;
  for (auto& c : combos) {
    const HeadConfig& config = config_of(c);
    const ProbeCombination& p = c.point();
    CombinationResult& r = c.result;
    r.levels = config.levels;
    r.train_rows = fraction_of(c).train_rows;
    r.point_id = std::string(head_name(config.type)) + " levels=" + config.levels_text() +
                 (config.type == HeadType::kLogreg ? " C=" + format_number(p.C)
                  : config.type == HeadType::kKnn  ? " k=" + std::to_string(p.k)
                                                   : " lr=" + format_number(p.lr) + " wd=" + format_number(p.weight_decay)) +
                 (several_fractions ? " fraction=" + format_number(p.train_fraction) : "");
    r.id = r.point_id + (seeds ? " seed=" + std::to_string(p.seed) : "");
  }
}

void ProbePass::choose_tier() {
  TierInputs in;
  in.request = plan.tier;
  in.cuda = device.is_cuda();
  in.row_bytes = resident_row_bytes(columns);
  in.rows = data->train().size() + data->val().size() + data->test().size();
  in.val_rows = data->val().size();
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
  const bool knn = plan.grid.front().head == HeadType::kKnn;
  const std::int64_t batch_size =
      knn && tier != FeedTier::kStream ? std::max<std::int64_t>(plan.batch_size, 4096) : plan.batch_size;
  const auto t_load = Clock::now();
  train_feed = std::make_unique<FeatureFeed>(*data, 0, columns, tier, device, batch_size, buffer_bytes);
  val_feed = std::make_unique<FeatureFeed>(*data, 1, columns, val_tier, device, batch_size, buffer_bytes);
  if (data->test().size() > 0) {
    test_feed = std::make_unique<FeatureFeed>(*data, 2, columns, tier, device, batch_size, buffer_bytes);
  }
  load_seconds = seconds_since(t_load);
}

// Per-channel statistics from the train rows each bank trains on (its fraction's).
void ProbePass::standardize() {
  for (std::size_t f = 0; f < fractions.size(); ++f) {
    std::vector<std::size_t> mine;
    for (const auto& group : groups) {
      if (group.fraction != f) continue;
      for (auto b : group.banks) {
        if (banks[b].heads.config().standardize) mine.push_back(b);
      }
    }
    if (!mine.empty()) standardize_banks(f, mine);
  }
}

void ProbePass::standardize_banks(std::size_t fraction, const std::vector<std::size_t>& mine) {
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

std::vector<at::Tensor> ProbePass::bank_inputs(std::size_t b, const FeedBatch& batch) const {
  std::vector<at::Tensor> inputs;
  for (auto c : banks[b].inputs) inputs.push_back(batch.columns[c]);
  return inputs;
}

std::vector<MetricAccumulator> ProbePass::evaluate(FeatureFeed& feed) {
  std::vector<MetricAccumulator> acc;
  for (const auto& bank : banks) acc.emplace_back(task, data->num_outputs(), data->ignore_index(), bank.heads.members());
  c10::NoGradGuard no_grad;
  feed.start(false, 0);
  while (auto batch = feed.next()) {
    if (stop_requested()) throw Interrupted("train-probe interrupted; no results written");
    const at::Tensor target = is_dense(task) ? batch->columns.back() : batch->targets;
    for (std::size_t i = 0; i < banks.size(); ++i) acc[i].add(banks[i].heads.forward(bank_inputs(i, *batch), false), target);
  }
  return acc;
}

std::vector<at::Tensor> ProbePass::pooled_split(FeatureFeed& feed, at::Tensor* targets, bool normalize,
                                                std::vector<std::size_t> of) {
  if (of.empty()) {
    for (std::size_t i = 0; i < banks.size(); ++i) of.push_back(i);
  }
  std::vector<std::vector<at::Tensor>> parts(of.size());
  std::vector<at::Tensor> ys;
  feed.start(false, 0);
  while (auto batch = feed.next()) {
    for (std::size_t j = 0; j < of.size(); ++j) {
      const at::Tensor z = banks[of[j]].heads.pooled_features(bank_inputs(of[j], *batch));
      parts[j].push_back(normalize ? l2_normalize(z) : z);
    }
    ys.push_back(batch->targets);
  }
  *targets = ys.empty() ? at::empty({0}, at::kLong) : at::cat(ys);
  std::vector<at::Tensor> out;
  for (auto& p : parts) out.push_back(p.empty() ? at::Tensor() : at::cat(p));
  return out;
}

void ProbePass::test_best_states() {
  for (auto& c : combos) {
    if (!c.best_state.empty()) banks[c.bank].heads.load_member_state(c.member, c.best_state);
  }
  if (std::all_of(combos.begin(), combos.end(),
                  [](const Combination& c) { return c.result.diverged_epoch > 0 && c.best_state.empty(); })) {
    throw InputError(divergence(combos.front()) + (combos.size() > 1 ? ", and every other combination diverged too" : "") +
                     "; lower the learning rate (or check the features for NaN)");
  }
  choose_best();
  if (!test_feed) return;
  auto test = evaluate(*test_feed);
  for (auto& c : combos) {
    if (c.best_state.empty()) continue;  // diverged before its first finite epoch: its weights are not finite
    c.result.test = test[c.bank].result(c.member);
    // Intervals for every combination: resampling reuses the per-image records, so it is cheap.
    if (options.bootstrap > 0) c.result.test_ci95 = test[c.bank].bootstrap(c.member, options.bootstrap, c.point().seed);
  }
}

void ProbePass::choose_best() {
  for (const auto& warning : warnings) std::fprintf(stderr, "embcache: warning: %s\n", warning.c_str());
  // With several seeds a combination is judged by its mean over them (NaN when a seed has no
  // result); the pick is its first seed's head.
  std::map<std::string, std::pair<double, std::int64_t>> sums;  // point -> (sum, seeds)
  for (const auto& c : combos) {
    auto& [sum, n] = sums[c.result.point_id];
    sum += c.result.best_value;
    ++n;
  }
  auto value = [&](const Combination& c) {
    const auto& [sum, n] = sums[c.result.point_id];
    return sum / double(n);
  };
  best = 0;
  for (std::size_t i = 0; i < combos.size(); ++i) {
    const double v = value(combos[i]), b = value(combos[best]);
    if (std::isnan(b) || (std::isfinite(v) && (higher ? v > b : v < b))) best = i;
  }
  if (std::isnan(combos[best].result.best_value)) {
    throw InputError("no combination produced a finite validation " + primary + "; check the labels of split '" +
                     data->val().name + "'");
  }
}

std::function<void(const std::string&)> ProbePass::member_saver(const Combination& c) const {
  const HeadBank& bank = banks[c.bank].heads;
  const std::int64_t member = c.member;
  return [&bank, member](const std::string& path) { bank.save_member(member, path); };
}

}  // namespace embcache
