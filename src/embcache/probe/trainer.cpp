#include "embcache/probe/trainer.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "embcache/core/clock.hpp"
#include "embcache/core/device.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/core/memory_info.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/core/progress.hpp"
#include "embcache/core/stop_request.hpp"
#include "embcache/probe/feature_feed.hpp"
#include "embcache/probe/heads.hpp"
#include "embcache/probe/metrics.hpp"
#include "embcache/probe/optimizer.hpp"

namespace embcache {
namespace {


// One point of the grid: a head on a level set with a learning rate and weight decay.
struct Combination {
  std::string id;
  HeadConfig head;
  std::string levels_requested;
  double lr = 0, weight_decay = 0;
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

struct Bank {
  HeadBank heads;
  std::vector<std::size_t> combos;  // member g -> combination index
  std::vector<std::size_t> inputs;  // feed column index of each of the head's levels
  std::unique_ptr<BankOptimizer> optimizer;
};

std::vector<std::vector<std::string>> parse_level_sets(const std::string& text) {
  if (text.empty()) throw UsageError("--levels: required (a level name or index, e.g. --levels 0, or 1+2 for fpn)");
  std::vector<std::vector<std::string>> sets;
  for (const auto& item : split_list(text, "--levels")) {
    std::vector<std::string> set;
    std::size_t start = 0;
    while (true) {
      const auto plus = item.find('+', start);
      const std::string name = item.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
      if (name.empty()) throw UsageError("--levels: empty level name in \"" + item + "\"");
      set.push_back(name);
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
    sets.push_back(set);
  }
  return sets;
}

// A value listed twice in a grid list would train the same heads twice and report them twice.
template <typename T, typename Text>
void refuse_repeats(const std::vector<T>& values, const std::string& option, Text text) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (values[j] == values[i]) {
        throw UsageError(option + ": " + text(values[i]) + " is listed twice; list each value once");
      }
    }
  }
}

std::string level_set_text(const std::vector<std::string>& set) {
  std::string text;
  for (const auto& l : set) text += (text.empty() ? "" : "+") + l;
  return text;
}

bool decide_standardize(const std::string& text, HeadType type) {
  if (text == "on") return true;
  if (text == "off") return false;
  if (text == "auto") return type == HeadType::kLinear || type == HeadType::kMlp || type == HeadType::kPixelShuffle;
  throw UsageError("--standardize: expected auto, on or off, got \"" + text + "\"");
}

// One head of the grid on one level set, shapes from `cache`: build_grid trains it,
// preflight_probe only validates it (with `outputs` 0). `out_size` is the mask's {h, w}.
HeadConfig configure_head(HeadType type, ProbeTask task, const std::vector<std::string>& level_set,
                          const CacheFileReader& cache, std::vector<std::int64_t> out_size,
                          std::vector<std::int64_t> hidden, std::int64_t outputs, const ProbeOptions& options) {
  HeadConfig config;
  config.type = type;
  config.task = task;
  for (const auto& name : level_set) {
    const LevelSpec& level = find_level(cache, name);
    config.levels.push_back(level.name);
    config.level_shapes.push_back(level.row_shape);
  }
  config.outputs = outputs;
  config.out_size = std::move(out_size);
  config.hidden = std::move(hidden);
  if (type == HeadType::kMlp && config.hidden.empty()) config.hidden = {512};
  config.dropout = options.dropout;
  config.conv_blocks = options.conv_blocks;
  config.standardize = decide_standardize(options.standardize, type);
  config.validate();
  return config;
}

// Per-member training loss [G] for outputs [G, B, ...].
at::Tensor member_losses(ProbeTask task, const at::Tensor& out, const FeedBatch& batch, std::int64_t ignore_index,
                         double label_smoothing) {
  const std::int64_t g = out.size(0), b = out.size(1);
  switch (task) {
    case ProbeTask::kClassification:
      return at::cross_entropy_loss(out.reshape({g * b, out.size(2)}), batch.targets.repeat({g}), {},
                                    at::Reduction::None, -100, label_smoothing)
          .view({g, b})
          .mean(1);
    case ProbeTask::kMultilabel:
      return at::binary_cross_entropy_with_logits(out, batch.targets.unsqueeze(0).expand_as(out), {}, {},
                                                  at::Reduction::None)
          .mean({1, 2});
    case ProbeTask::kRegression:
      return (out - batch.targets.unsqueeze(0)).pow(2).mean({1, 2});
    case ProbeTask::kSegmentation: {
      const at::Tensor mask = batch.columns.back();
      const at::Tensor loss = at::cross_entropy_loss(out.reshape({g * b, out.size(2), out.size(3), out.size(4)}),
                                                     mask.repeat({g, 1, 1}), {}, at::Reduction::None,
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
  at::NoGradGuard no_grad;
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

std::int64_t budget_bytes(const std::string& text, std::int64_t automatic, const std::string& what) {
  return text == "auto" ? automatic : parse_bytes(text, what);
}

}  // namespace

std::string history_csv(const nlohmann::json& metrics) {
  const std::string primary = metrics.value("primary_metric", std::string());
  std::ostringstream csv;
  csv << "epoch,combination,head,levels,lr,weight_decay,train_loss,val_" << primary << ",seconds\n";
  for (const auto& row : metrics["history"]) {
    const auto& v = row["val"].value(primary, nlohmann::json(nullptr));
    csv << row["epoch"].get<std::int64_t>() << "," << csv_field(row["combination"].get<std::string>()) << ","
        << row["head"].get<std::string>() << "," << row["levels"].get<std::string>() << ","
        << format_number(row["lr_base"].get<double>()) << "," << format_number(row["weight_decay"].get<double>()) << ","
        << format_number(row["train_loss"].get<double>()) << "," << (v.is_number() ? format_number(v.get<double>()) : "")
        << "," << format_number(row["seconds"].get<double>()) << "\n";
  }
  return csv.str();
}

void preflight_probe(const ProbeOptions& options) {
  check_probe_options(options);
  std::vector<std::unique_ptr<CacheFileReader>> caches;
  for (const auto& path : options.caches) caches.push_back(std::make_unique<CacheFileReader>(path));
  if (caches.empty()) throw UsageError("--cache: at least one cache is needed");
  const ProbeTask task = parse_task(options.task);
  check_caches_for_task(caches, task);
  // Each head of the grid on each level set, as build_grid will configure it: shapes come from
  // the cache, so a conv head on a vector level fails here rather than mid-study.
  const CacheFileReader& first = *caches.front();
  const bool pixel_values = task == ProbeTask::kPixelRegression && first.label_kinds().has_pixel_value;
  const auto out_size = pixel_values ? first.pixel_value_shape() : first.mask_shape();  // as ProbeData
  const auto hidden = options.hidden.empty() ? std::vector<std::int64_t>{} : parse_int_list(options.hidden, "--hidden");
  for (const auto& head : split_list(options.head, "--head")) {
    for (const auto& set : parse_level_sets(options.levels)) {
      configure_head(parse_head(head), task, set, first, out_size, hidden, /*outputs=*/0, options);
    }
  }
}

void check_probe_options(const ProbeOptions& options) {
  // The run directory is created at the end (an interrupted run leaves none); a path that can
  // never be one must not cost the whole training.
  if (!options.out.empty()) {
    std::error_code ec;
    std::filesystem::path existing = std::filesystem::absolute(options.out, ec);
    while (!existing.empty() && !std::filesystem::exists(existing, ec) && existing != existing.parent_path()) {
      existing = existing.parent_path();
    }
    if (std::filesystem::exists(existing, ec) && !std::filesystem::is_directory(existing, ec)) {
      throw UsageError("--out " + options.out + ": " + existing.string() + " is a file; name a directory for "
                       "the run (metrics.json, history.csv, head.pt)");
    }
  }
  const ProbeTask task = parse_task(options.task);
  parse_optimizer(options.optimizer);
  parse_schedule(options.schedule);
  if (options.epochs < 1) throw UsageError("--epochs: expected at least 1");
  if (options.batch_size < 1) throw UsageError("--batch-size: expected at least 1");
  if (options.patience < 0) throw UsageError("--patience: expected 0 (off) or more epochs");
  if (options.label_smoothing < 0 || options.label_smoothing >= 1) throw UsageError("--label-smoothing: expected [0, 1)");
  if (options.dropout < 0 || options.dropout >= 1) throw UsageError("--dropout: expected a probability in [0, 1)");
  if (options.warmup_epochs < 0) throw UsageError("--warmup-epochs: expected 0 or more");
  if (options.warmup_epochs > 0 && options.warmup_epochs >= double(options.epochs)) {
    throw UsageError("--warmup-epochs: " + format_number(options.warmup_epochs) + " is not shorter than --epochs " +
                     std::to_string(options.epochs) + ", so the learning rate would never reach --lr; "
                     "warm up for fewer epochs or train for more");
  }
  if (options.bootstrap < 0) throw UsageError("--bootstrap: expected 0 (off) or a number of resamples");
  for (double lr : parse_double_list(options.lr, "--lr")) {
    if (lr <= 0) throw UsageError("--lr: learning rates must be positive");
  }
  for (double wd : parse_double_list(options.weight_decay, "--weight-decay")) {
    if (wd < 0) throw UsageError("--weight-decay: must be 0 or more");
  }
  if (!options.hidden.empty()) parse_int_list(options.hidden, "--hidden");
  if (options.tier != "auto" && options.tier != "gpu" && options.tier != "host" && options.tier != "stream") {
    throw UsageError("--tier: expected auto, gpu, host or stream, got \"" + options.tier + "\"");
  }
  if (options.tier == "gpu" && !resolve_device(options.device).is_cuda()) {
    throw UsageError("--tier: gpu needs a CUDA --device");
  }
  for (const auto* budget : {&options.gpu_memory_budget, &options.host_memory_budget}) {
    if (*budget != "auto") parse_bytes(*budget, budget == &options.gpu_memory_budget ? "--gpu-memory-budget" : "--host-memory-budget");
  }
  decide_standardize(options.standardize, HeadType::kLinear);
  const auto level_sets = parse_level_sets(options.levels);
  refuse_repeats(level_sets, "--levels", level_set_text);
  for (const auto& set : level_sets) {
    refuse_repeats(set, "--levels " + level_set_text(set), [](const std::string& l) { return "level " + l; });
  }
  refuse_repeats(parse_double_list(options.lr, "--lr"), "--lr", format_number);
  refuse_repeats(parse_double_list(options.weight_decay, "--weight-decay"), "--weight-decay", format_number);
  std::vector<HeadType> types;
  for (const auto& h : split_list(options.head, "--head")) types.push_back(parse_head(h));
  refuse_repeats(types, "--head", [](HeadType t) { return std::string(head_name(t)); });
  for (HeadType type : types) {
    for (const auto& set : level_sets) check_head_levels(type, task, set.size(), level_set_text(set));
  }
}

namespace {

// One train-probe run, step by step: options, the grid of banks, the data tier, standardisation,
// training with validation, test, outputs. Each step reads what the previous ones set.
class Trainer {
 public:
  Trainer(const ProbeOptions& options, const ProbeHooks& hooks) : options(options), hooks(hooks) {}

  ProbeResult run() {
    parse();
    build_grid();
    choose_tier();
    standardize();
    train();
    test();
    return write_outputs();
  }

 private:
  void parse() {
    t_start = Clock::now();
    // The plain interpreter: same numbers on every call (no profiling-driven re-optimisation).
    torch::jit::setGraphExecutorOptimize(false);
    if (options.out.empty()) throw UsageError("--out: required (the run directory to write)");
    check_probe_options(options);
    task = parse_task(options.task);
    optimizer = parse_optimizer(options.optimizer);
    schedule = parse_schedule(options.schedule);
    for (const auto& h : split_list(options.head, "--head")) head_types.push_back(parse_head(h));
    level_sets = parse_level_sets(options.levels);
    lrs = parse_double_list(options.lr, "--lr");
    decays = parse_double_list(options.weight_decay, "--weight-decay");
    if (!options.hidden.empty()) hidden = parse_int_list(options.hidden, "--hidden");
    device = resolve_device(options.device);
    if (options.threads > 0) at::set_num_threads(options.threads);

    data_ = std::make_unique<ProbeData>(options, task);
    // Not progress: shown with --quiet too (studies run their passes quietly).
    for (const auto& warning : data_->warnings()) std::fprintf(stderr, "embcache: warning: %s\n", warning.c_str());
  }

  void build_grid() {
    ProbeData& data = *data_;
    // The grid, grouped into banks: heads of one architecture share a bank when they can.
    std::map<std::string, bool> level_pooled;  // pooled only while every head reading it pools
    std::vector<HeadConfig> configs;
    std::vector<std::string> configs_requested;  // each config's level set as written
    for (HeadType type : head_types) {
      for (const auto& set : level_sets) {
        std::string requested;
        for (const auto& l : set) requested += (requested.empty() ? "" : "+") + l;
        configs_requested.push_back(requested);
        const HeadConfig config = configure_head(type, task, set, *data.caches().front(), data.mask_shape(), hidden,
                                                 data.num_outputs(), options);
        for (const auto& name : config.levels) {
          auto it = level_pooled.find(name);
          level_pooled[name] = (it == level_pooled.end() ? true : it->second) && config.pooled_input();
        }
        configs.push_back(config);
      }
    }
    for (const auto& [name, pooled] : level_pooled) {
      column_of[name] = columns.size();
      columns.push_back(level_column(data, data.level(name), pooled));
    }
    if (is_dense(task)) columns.push_back(mask_column(data));

    for (std::size_t ci = 0; ci < configs.size(); ++ci) {
      const HeadConfig& config = configs[ci];
      auto add_bank = [&](std::int64_t members) {
        Bank bank{HeadBank(config, members, options.seed, device), {}, {}, nullptr};
        for (const auto& name : config.levels) bank.inputs.push_back(column_of.at(name));
        banks.push_back(std::move(bank));
      };
      if (config.bankable()) add_bank(std::int64_t(lrs.size() * decays.size()));
      for (double lr : lrs) {
        for (double wd : decays) {
          if (!config.bankable()) add_bank(1);
          Combination c;
          c.head = config;
          c.levels_requested = configs_requested[ci];
          c.lr = lr;
          c.weight_decay = wd;
          c.bank = banks.size() - 1;
          c.member = std::int64_t(banks.back().combos.size());
          c.id = std::string(head_name(config.type)) + " levels=" + config.levels_text() + " lr=" + format_number(lr) +
                 " wd=" + format_number(wd);
          banks.back().combos.push_back(combos.size());
          combos.push_back(std::move(c));
        }
      }
    }
    for (auto& bank : banks) {
      std::vector<double> lr, wd;
      for (auto ci : bank.combos) {
        lr.push_back(combos[ci].lr);
        wd.push_back(combos[ci].weight_decay);
      }
      bank.optimizer = std::make_unique<BankOptimizer>(optimizer, bank.heads.parameters(), lr, wd);
    }
  }

  void choose_tier() {
    ProbeData& data = *data_;
    // Which tier holds the features.
    row_bytes = resident_row_bytes(columns);
    total_rows = data.train().size() + data.val().size() + data.test().size();
    needed = row_bytes * total_rows;
    host_budget = budget_bytes(options.host_memory_budget, available_host_bytes() / 2, "--host-memory-budget");
    gpu_budget = 0;
    if (device.is_cuda()) {
      const std::int64_t free = free_gpu_bytes(device.index() < 0 ? 0 : device.index());
      gpu_budget = budget_bytes(options.gpu_memory_budget, free > 0 ? free / 2 : 0, "--gpu-memory-budget");
    }
    if (options.tier == "gpu" || (options.tier == "auto" && device.is_cuda() && needed <= gpu_budget)) {
      tier = FeedTier::kGpu;
      if (needed > gpu_budget) {
        throw UsageError("--tier gpu: the features need " + format_bytes(double(needed)) + " but --gpu-memory-budget is " +
                         format_bytes(double(gpu_budget)) + "; raise the budget or use --tier auto");
      }
    } else if (options.tier == "host" || (options.tier == "auto" && needed <= host_budget)) {
      tier = FeedTier::kHost;
      if (needed > host_budget) {
        throw UsageError("--tier host: the features need " + format_bytes(double(needed)) + " but --host-memory-budget is " +
                         format_bytes(double(host_budget)) + "; raise the budget or use --tier auto (streams from disk)");
      }
    } else {
      tier = FeedTier::kStream;
    }
    val_tier = tier;  // unless streaming keeps val in memory (below)
    // Stream: a third of the host budget is the shuffle buffer; while it refills, the blocks read
    // and the buffer briefly coexist, and the rest covers queued batches.
    buffer_bytes = host_budget / 3;
    if (tier == FeedTier::kStream) {
      const std::int64_t batch_bytes = row_bytes * options.batch_size * 8;
      if (batch_bytes > host_budget) {
        // Small data: holding it all takes less than streaming it would.
        const std::string advice = options.tier == "auto" && needed < batch_bytes
                                       ? "raise the budget to " + format_bytes(double(needed)) +
                                             " (the features then stay in memory) or lower --batch-size"
                                       : "raise the budget or lower --batch-size";
        throw UsageError("--host-memory-budget " + format_bytes(double(host_budget)) + " is exhausted: streaming needs about " +
                         format_bytes(double(batch_bytes)) + " for a few batches of " + std::to_string(options.batch_size) +
                         " rows; " + advice);
      }
      // Validation runs every epoch, and its rows usually share blocks with train rows (a
      // --val-fraction carve, interleaved windows): streamed, it would read most of the cache
      // again each epoch. Held in memory when it takes at most a third of the budget; the
      // stream shares the rest.
      const std::int64_t val_bytes = row_bytes * data.val().size();
      if (val_bytes <= host_budget / 3 && batch_bytes <= host_budget - val_bytes) {
        val_tier = FeedTier::kHost;
        buffer_bytes = (host_budget - val_bytes) / 3;
      }
    }
    const auto t_load = Clock::now();
    train_feed = std::make_unique<FeatureFeed>(data, 0, columns, tier, device, options.batch_size, buffer_bytes);
    val_feed = std::make_unique<FeatureFeed>(data, 1, columns, val_tier, device, options.batch_size, buffer_bytes);
    if (data.test().size() > 0) {
      test_feed = std::make_unique<FeatureFeed>(data, 2, columns, tier, device, options.batch_size, buffer_bytes);
    }
    load_seconds = seconds_since(t_load);
  }

  void standardize() {
    // Standardisation statistics from the training split.
    std::map<std::string, ChannelStats> stats;  // key: level + "/pooled" or "/map"
    bool need_stats = false;
    for (const auto& bank : banks) need_stats = need_stats || bank.heads.config().standardize;
    if (need_stats) {
      train_feed->start(false, 0);
      while (auto batch = train_feed->next()) {
        std::set<std::string> added;  // a (level, view) read by several banks counts once
        for (const auto& bank : banks) {
          const HeadConfig& config = bank.heads.config();
          if (!config.standardize) continue;
          for (std::size_t i = 0; i < config.levels.size(); ++i) {
            const at::Tensor& x = batch->columns[bank.inputs[i]];
            const bool pooled = config.pooled_input();
            const std::string key = config.levels[i] + (pooled ? "/pooled" : "/map");
            if (!added.insert(key).second) continue;
            stats[key].add(pooled && x.dim() == 4 ? x.mean({2, 3}) : x);
          }
        }
      }
      for (auto& bank : banks) {
        const HeadConfig& config = bank.heads.config();
        if (!config.standardize) continue;
        std::vector<at::Tensor> mean, std;
        for (const auto& level : config.levels) {
          const auto [m, s] = stats.at(level + (config.pooled_input() ? "/pooled" : "/map")).mean_std();
          mean.push_back(m);
          std.push_back(s);
        }
        bank.heads.set_standardization(mean, std);
      }
    }
  }

  void train() {
    ProbeData& data = *data_;
    // Training.
    steps_per_epoch = train_feed->batches_per_epoch();
    total_steps = steps_per_epoch * options.epochs;
    warmup_steps = std::int64_t(std::llround(options.warmup_epochs * double(steps_per_epoch)));
    higher = higher_is_better(task);
    primary = primary_metric(task);
    history = nlohmann::json::array();
    wait_before_training = train_feed->stats().wait_seconds;  // the stats pass waits too
    for (std::int64_t epoch = 1; epoch <= options.epochs; ++epoch) {
      const auto t_epoch = Clock::now();
      Progress progress("epoch " + std::to_string(epoch) + "/" + std::to_string(options.epochs), steps_per_epoch,
                        options.quiet ? Progress::Mode::kQuiet : Progress::Mode::kAuto);
      std::vector<at::Tensor> loss_sum;
      for (const auto& bank : banks) loss_sum.push_back(at::zeros({bank.heads.members()}, at::TensorOptions().dtype(at::kDouble).device(device)));
      std::int64_t seen = 0, done = 0;
      train_feed->start(true, options.seed * 1000003ull + std::uint64_t(epoch));
      while (auto batch = train_feed->next()) {
        if (stop_requested()) throw Interrupted("train-probe interrupted; no results written");
        const double factor = schedule_factor(schedule, step, total_steps, warmup_steps);
        const std::int64_t b = batch->ids.size(0);
        for (std::size_t i = 0; i < banks.size(); ++i) {
          Bank& bank = banks[i];
          std::vector<bool> active;
          bool any = false;
          for (auto ci : bank.combos) {
            active.push_back(combos[ci].active);
            any = any || combos[ci].active;
          }
          if (!any) continue;
          const at::Tensor out = bank.heads.forward(bank_inputs(bank, *batch), true);
          const at::Tensor losses = member_losses(task, out, *batch, data.ignore_index(), options.label_smoothing);
          losses.sum().backward();
          bank.optimizer->step(factor, active);
          bank.optimizer->zero_grad();
          loss_sum[i].add_(losses.detach().to(at::kDouble) * double(b));
        }
        seen += b;
        ++step;
        progress.update(++done);
      }
      progress.finish();
      train_seconds += seconds_since(t_epoch);
      samples_trained += seen;
      ++epochs_run;

      // Validation, early stopping, history.
      auto val = evaluate(banks, *val_feed, data);
      const double epoch_seconds = seconds_since(t_epoch);
      bool any_active = false;
      for (std::size_t i = 0; i < banks.size(); ++i) {
        const at::Tensor mean_loss = (loss_sum[i] / double(seen)).cpu();
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
                                {"lr", c.lr * schedule_factor(schedule, std::max<std::int64_t>(0, step - 1), total_steps, warmup_steps)},
                                {"seconds", epoch_seconds}};
          nlohmann::json scalars = nlohmann::json::object();
          for (const auto& [k, v] : metrics.items()) {
            if (v.is_number() || v.is_null()) scalars[k] = v;
          }
          row["val"] = scalars;
          history.push_back(row);
        }
      }
      if (!any_active) break;
    }
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
    // Shown once training has a result (an error is one line): with --quiet too, like the data's.
    for (const auto& warning : warnings_) std::fprintf(stderr, "embcache: warning: %s\n", warning.c_str());
    best = 0;
    for (std::size_t i = 0; i < combos.size(); ++i) {
      const double v = combos[i].best_value, b = combos[best].best_value;
      if (std::isnan(b) || (std::isfinite(v) && (higher ? v > b : v < b))) best = i;
    }
    if (std::isnan(combos[best].best_value)) {
      throw InputError("no combination produced a finite validation " + primary + "; check the labels of split '" +
                       data.val().name + "'");
    }
    if (test_feed) {
      auto test = evaluate(banks, *test_feed, data);
      for (auto& c : combos) {
        if (c.best_state.empty()) continue;  // diverged before its first finite epoch: its weights are not finite
        c.test = test[c.bank].result(c.member);
        // Intervals for every combination: resampling reuses the per-image records, so it is cheap.
        if (options.bootstrap > 0) c.test_ci = test[c.bank].bootstrap(c.member, options.bootstrap, options.seed);
      }
    }
  }

  ProbeResult write_outputs() {
    ProbeData& data = *data_;
    // Outputs.
    std::error_code ec;
    std::filesystem::create_directories(options.out, ec);
    if (ec) throw IoError("--out " + options.out + ": cannot create the run directory (" + ec.message() + ")");
    const Combination& winner = combos[best];
    banks[winner.bank].heads.save_member(winner.member, options.out + "/head.pt.tmp");
    if (std::rename((options.out + "/head.pt.tmp").c_str(), (options.out + "/head.pt").c_str()) != 0) {
      throw IoError("--out " + options.out + ": cannot move head.pt into place");
    }

    nlohmann::json j;
    j["embcache_version"] = EMBCACHE_VERSION;
    j["options"] = probe_options_to_json(options);
    j["task"] = task_name(task);
    j["num_outputs"] = data.num_outputs();
    if (!data.caches().front()->label_kinds().class_names.empty()) {
      j["class_names"] = data.caches().front()->label_kinds().class_names;
    }
    j["primary_metric"] = primary;
    j["splits"] = {{"train", {{"name", data.train().name}, {"rows", data.train().size()}}},
                   {"val", {{"name", data.val().name}, {"rows", data.val().size()}}},
                   {"test", {{"name", data.test().name}, {"rows", data.test().size()}}}};
    j["device"] = device.str();
    j["best"] = {{"combination", winner.id}, {"head", head_name(winner.head.type)}, {"levels", winner.head.levels},
                 {"lr", winner.lr}, {"weight_decay", winner.weight_decay}, {"epoch", winner.best_epoch}};
    j["val"] = winner.best_val;
    j["test"] = winner.test.is_null() ? nlohmann::json::object() : winner.test;
    if (!winner.test_ci.is_null()) j["test_ci95"] = winner.test_ci;
    nlohmann::json grid = nlohmann::json::array();
    for (const auto& c : combos) {
      nlohmann::json row = {{"combination", c.id}, {"head", head_name(c.head.type)}, {"levels", c.head.levels},
                            {"lr", c.lr}, {"weight_decay", c.weight_decay}, {"best_epoch", c.best_epoch},
                            {"val", c.best_val.is_null() ? nlohmann::json::object() : c.best_val}, {"test", c.test.is_null() ? nlohmann::json::object() : c.test}};
      if (!c.test_ci.is_null()) row["test_ci95"] = c.test_ci;
      if (c.diverged_epoch > 0) row["diverged_epoch"] = c.diverged_epoch;
      grid.push_back(row);
    }
    j["combinations"] = grid;
    j["history"] = history;
    const double total_seconds = seconds_since(t_start);
    j["timing"] = {{"train_seconds", train_seconds}, {"load_seconds", load_seconds}, {"total_seconds", total_seconds},
                   {"epochs", epochs_run}, {"samples_per_second", train_seconds > 0 ? double(samples_trained) / train_seconds : 0.0},
                   {"heads", combos.size()}, {"banks", banks.size()}};
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
    nlohmann::json data_json = total.to_json(tier);
    data_json["wait_fraction"] = train_seconds > 0 ? (train_feed->stats().wait_seconds - wait_before_training) / train_seconds : 0.0;
    data_json["host_memory_budget"] = host_budget;
    data_json["val_tier"] = tier_name(val_tier);
    if (device.is_cuda()) data_json["gpu_memory_budget"] = gpu_budget;
    data_json["bytes_needed_resident"] = needed;
    data_json["peak_rss_bytes"] = peak_rss_bytes();
    j["data"] = data_json;
    std::vector<std::string> warnings = data_->warnings();
    warnings.insert(warnings.end(), warnings_.begin(), warnings_.end());
    if (!warnings.empty()) j["warnings"] = warnings;

    write_text_atomically(options.out + "/history.csv", history_csv(j), "--out");
    write_text_atomically(options.out + "/metrics.json", j.dump(2) + "\n", "--out");

    if (hooks.on_combination) {
      for (std::size_t i = 0; i < combos.size(); ++i) {
        const Combination& c = combos[i];
        CombinationOutcome outcome;
        outcome.id = c.id;
        outcome.head = head_name(c.head.type);
        outcome.levels = c.head.levels;
        outcome.levels_requested = c.levels_requested;
        outcome.lr = c.lr;
        outcome.weight_decay = c.weight_decay;
        outcome.best_epoch = c.best_epoch;
        outcome.diverged_epoch = c.diverged_epoch;
        outcome.val = c.best_val.is_null() ? nlohmann::json::object() : c.best_val;
        outcome.test = c.test.is_null() ? nlohmann::json::object() : c.test;
        outcome.test_ci95 = c.test_ci;
        outcome.best = i == best;
        outcome.run_metrics = &j;
        outcome.history = nlohmann::json::array();
        for (const auto& row : history) {
          if (row["combination"] == c.id) outcome.history.push_back(row);
        }
        const HeadBank& bank = banks[c.bank].heads;
        const std::int64_t member = c.member;
        outcome.save_head = [&bank, member](const std::string& path) { bank.save_member(member, path); };
        hooks.on_combination(outcome);
      }
    }

    std::ostringstream line;
    line << std::fixed << std::setprecision(4);  // metrics as in a study's results table: 0.6840
    line << "train-probe: best " << winner.id << " (epoch " << winner.best_epoch << "): val " << primary << " "
         << winner.best_value;
    if (j["test"].contains(primary) && j["test"][primary].is_number()) {
      line << ", test " << primary << " " << j["test"][primary].get<double>();
    }
    line << "; " << combos.size() << " head" << (combos.size() == 1 ? "" : "s") << ", " << epochs_run << " epoch"
         << (epochs_run == 1 ? "" : "s") << ", "
         << std::fixed << std::setprecision(1) << train_seconds << " s, " << std::setprecision(0)
         << j["timing"]["samples_per_second"].get<double>() << " samples/s, tier " << tier_name(tier) << " -> "
         << options.out;
    return {j, line.str()};
  }

  const ProbeOptions& options;
  const ProbeHooks& hooks;
  std::vector<std::string> warnings_;  // of the training itself (diverged combinations)
  Clock::time_point t_start;
  ProbeTask task = ProbeTask::kClassification;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  Schedule schedule = Schedule::kCosine;
  std::vector<HeadType> head_types;
  std::vector<std::vector<std::string>> level_sets;
  std::vector<double> lrs, decays;
  std::vector<std::int64_t> hidden;
  c10::Device device{c10::kCPU};
  std::unique_ptr<ProbeData> data_;
  // The grid.
  std::vector<Combination> combos;
  std::vector<Bank> banks;
  std::vector<FeedColumn> columns;
  std::map<std::string, std::size_t> column_of;
  // The data tier.
  std::int64_t row_bytes = 0, total_rows = 0, needed = 0, host_budget = 0, gpu_budget = 0, buffer_bytes = 0;
  FeedTier tier = FeedTier::kHost;
  FeedTier val_tier = FeedTier::kHost;  // the tier, or host when streaming keeps val in memory
  std::unique_ptr<FeatureFeed> train_feed, val_feed, test_feed;
  double load_seconds = 0;
  // Training.
  std::int64_t steps_per_epoch = 0, total_steps = 0, warmup_steps = 0, step = 0, epochs_run = 0, samples_trained = 0;
  bool higher = true;
  std::string primary;
  nlohmann::json history = nlohmann::json::array();
  double train_seconds = 0, wait_before_training = 0;
  std::size_t best = 0;
};

}  // namespace

ProbeResult train_probe(const ProbeOptions& options, const ProbeHooks& hooks) {
  return Trainer(options, hooks).run();
}

}  // namespace embcache
