#include "embcache/probe/probe_plan.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "embcache/host/device.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/limits.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/probe/logistic_regression.hpp"

namespace embcache {
namespace {

using LevelSets = std::vector<std::vector<std::string>>;  // --levels: each set, the levels one head reads

LevelSets parse_level_sets(const std::string& text) {
  if (text.empty()) throw UsageError(OptionName{"levels"}, "required (a level name or index, e.g. --levels 0, or 1+2 for fpn)");
  LevelSets sets;
  for (const auto& item : split_list(text, {"levels"})) {
    std::vector<std::string> set;
    std::size_t start = 0;
    while (true) {
      const auto plus = item.find('+', start);
      const std::string name = item.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
      if (name.empty()) throw UsageError(OptionName{"levels"}, "empty level name in \"" + item + "\"");
      set.push_back(name);
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
    sets.push_back(set);
  }
  return sets;
}

std::string level_set_text(const std::vector<std::string>& set) {
  std::string text;
  for (const auto& l : set) text += (text.empty() ? "" : "+") + l;
  return text;
}

// A value listed twice in a grid list would train the same heads twice and report them twice.
// `within`: the level set a repeated level is in ("" for the grid lists themselves).
template <typename T, typename Text>
void refuse_repeats(const std::vector<T>& values, const OptionName& option, Text text, const std::string& within = "") {
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (values[j] != values[i]) continue;
      const std::string in = within.empty() ? "" : " in " + within;
      throw UsageError(option, text(values[i]) + " is listed twice" + in + "; list each value once");
    }
  }
}

// The run directory is created at the end (an interrupted run leaves none); a path that can
// never be one must not cost the whole training.
void check_out(const std::string& out) {
  if (out.empty()) return;
  std::error_code ec;
  std::filesystem::path existing = std::filesystem::absolute(out, ec);
  while (!existing.empty() && !std::filesystem::exists(existing, ec) && existing != existing.parent_path()) {
    existing = existing.parent_path();
  }
  if (std::filesystem::exists(existing, ec) && !std::filesystem::is_directory(existing, ec)) {
    throw UsageError(OptionName{"out"}, existing.string() + " is a file; name a directory for "
                     "the run (metrics.json, history.csv, head.pt)");
  }
}

void check_training(const ProbeOptions& o) {
  require_in_range(o.epochs, 1, kMaxEpochs, {"epochs"}, "epochs");
  require_in_range(o.patience, 0, kMaxEpochs, {"patience"}, "0 (off) or epochs");
  require_in_range(o.threads, 0, kMaxThreads, {"threads"}, "0 (LibTorch's default) or a thread count");
  require_in_range(o.num_classes, 0, kMaxClasses, {"num-classes"}, "0 (from the labels) or classes");
  require_in_range(o.conv_blocks, 1, kMaxConvBlocks, {"conv-blocks"}, "blocks");
  if (o.label_smoothing < 0 || o.label_smoothing >= 1) throw UsageError(OptionName{"label-smoothing"}, "expected [0, 1)");
  if (o.dropout < 0 || o.dropout >= 1) throw UsageError(OptionName{"dropout"}, "expected a probability in [0, 1)");
  if (o.warmup_epochs < 0) throw UsageError(OptionName{"warmup-epochs"}, "expected 0 or more");
  if (o.warmup_epochs > 0 && o.warmup_epochs >= double(o.epochs)) {
    throw UsageError(OptionName{"warmup-epochs"}, format_number(o.warmup_epochs) + " is not shorter than --epochs " +
                     std::to_string(o.epochs) + ", so the learning rate would never reach --lr; "
                     "warm up for fewer epochs or train for more");
  }
  require_in_range(o.bootstrap, 0, kMaxBootstrap, {"bootstrap"}, "0 (off) or resamples");
}

// auto: 64 rows for dense tasks, 256 otherwise. Dense heads (conv, fpn, unet, upernet) reached
// 5 points more test mIoU in 20 epochs with batches of 64 than of 256 (docs/train-probe.md,
// "Optimisation"); pooled heads train well with 256, and their run ids stay as they were.
std::int64_t resolve_batch_size(const std::string& text, ProbeTask task) {
  if (text == "auto") return is_dense(task) ? 64 : 256;
  std::int64_t rows = 0;
  try {
    std::size_t used = 0;
    rows = std::stoll(text, &used);
    if (used != text.size()) rows = 0;
  } catch (const std::exception&) {
    rows = 0;
  }
  if (rows < 1) throw UsageError(OptionName{"batch-size"}, "expected auto or a number of rows (at least 1), got \"" + text + "\"");
  require_in_range(rows, 1, kMaxProbeBatch, {"batch-size"}, "auto or rows");
  return rows;
}

// What the heads get (time axes reduced how) and how their losses weigh classes.
void plan_inputs_and_loss(const ProbeOptions& o, ProbePlan& plan) {
  plan.temporal_pool = temporal_pools().parse(o.temporal_pool, {"temporal-pool"});
  plan.class_weights = class_weight_modes().parse(o.class_weights, {"class-weights"});
  const bool has_classes = plan.task == ProbeTask::kClassification || plan.task == ProbeTask::kMultilabel ||
                           plan.task == ProbeTask::kSegmentation;
  if (plan.class_weights != ClassWeightMode::kNone && !has_classes) {
    throw UsageError(OptionName{"class-weights"}, std::string("applies to classification, multilabel and segmentation; --task ") +
                     task_name(plan.task) + " has no classes (use --class-weights none)");
  }
}

// Device, tier and memory budgets.
void plan_placement(const ProbeOptions& o, ProbePlan& plan) {
  plan.tier = tier_requests().parse(o.tier, {"tier"});
  plan.device = resolve_device(o.device);
  if (plan.tier == TierRequest::kGpu && !plan.device.is_cuda()) throw UsageError(OptionName{"tier"}, "gpu needs a CUDA --device");
  if (o.gpu_memory_budget != "auto") plan.gpu_budget = parse_bytes(o.gpu_memory_budget, {"gpu-memory-budget"});
  if (o.host_memory_budget != "auto") plan.host_budget = parse_bytes(o.host_memory_budget, {"host-memory-budget"});
  plan.standardize = standardize_modes().parse(o.standardize, {"standardize"});
}

// --levels: the level sets, each free of repeats, and no set given twice.
LevelSets checked_level_sets(const ProbeOptions& o) {
  auto level_sets = parse_level_sets(o.levels);
  refuse_repeats(level_sets, {"levels"}, level_set_text);
  for (const auto& set : level_sets) {
    refuse_repeats(set, {"levels"}, [](const std::string& l) { return "level " + l; }, level_set_text(set));
  }
  return level_sets;
}

// --head: the heads, free of repeats, each able to read each level set; logreg and knn alone.
std::vector<HeadType> checked_heads(const ProbeOptions& o, const ProbePlan& plan, const LevelSets& level_sets) {
  std::vector<HeadType> heads;
  for (const auto& h : split_list(o.head, {"head"})) heads.push_back(head_types().parse(h, {"head"}));
  refuse_repeats(heads, {"head"}, [](HeadType t) { return std::string(head_name(t)); });
  for (HeadType head : heads) {
    for (const auto& set : level_sets) check_head_levels(head, plan.task, set.size(), level_set_text(set));
  }
  const bool logreg = std::find(heads.begin(), heads.end(), HeadType::kLogreg) != heads.end();
  const bool knn = std::find(heads.begin(), heads.end(), HeadType::kKnn) != heads.end();
  if (logreg && heads.size() > 1) {
    throw UsageError(OptionName{"head"}, "logreg is fitted by L-BFGS, not trained by epochs; give it alone in its own run");
  }
  if (knn && heads.size() > 1) {
    throw UsageError(OptionName{"head"}, "knn votes with the train split, it is not trained by epochs; give it alone in its own run");
  }
  if (!logreg && o.C != "auto") throw UsageError(OptionName{"C"}, "applies to --head logreg only");
  if (!knn && o.k != "20") throw UsageError(OptionName{"k"}, "applies to --head knn only");
  return heads;
}

// --head knn: a point per level set and --k.
void plan_knn_points(const ProbeOptions& o, ProbePlan& plan, const LevelSets& level_sets) {
  if (!(o.knn_temperature > 0)) throw UsageError(OptionName{"knn-temperature"}, "must be positive");
  const std::vector<std::int64_t> ks = parse_int_list(o.k, {"k"});
  for (auto k : ks) require_in_range(k, 1, kMaxK, {"k"}, "neighbours");
  refuse_repeats(ks, {"k"}, [](std::int64_t k) { return std::to_string(k); });
  for (const auto& set : level_sets) {
    for (auto k : ks) plan.grid.push_back(ProbeCombination{HeadType::kKnn, set, 0, 0, 0, k});
  }
}

// --head logreg: a point per level set and --C (auto: default_c_grid).
void plan_logreg_points(const ProbeOptions& o, ProbePlan& plan, const LevelSets& level_sets) {
  const std::vector<double> cs = o.C == "auto" ? default_c_grid() : parse_double_list(o.C, {"C"});
  for (double c : cs) {
    if (!(c > 0) || !std::isfinite(c)) throw UsageError(OptionName{"C"}, "values must be positive");
  }
  refuse_repeats(cs, {"C"}, format_number);
  for (const auto& set : level_sets) {
    for (double c : cs) plan.grid.push_back(ProbeCombination{HeadType::kLogreg, set, 0, 0, c});
  }
}

// --head x --levels x --lr x --weight-decay (or x --C, x --k), each list free of repeats and each
// head able to read each level set: the points before fractions and seeds.
void plan_points(const ProbeOptions& o, ProbePlan& plan, const std::vector<double>& lrs, const std::vector<double>& decays) {
  const auto level_sets = checked_level_sets(o);
  refuse_repeats(lrs, {"lr"}, format_number);
  refuse_repeats(decays, {"weight-decay"}, format_number);
  const std::vector<HeadType> heads = checked_heads(o, plan, level_sets);
  if (heads.front() == HeadType::kKnn) {  // alone (checked_heads)
    plan_knn_points(o, plan, level_sets);
    return;
  }
  if (heads.front() == HeadType::kLogreg) {
    plan_logreg_points(o, plan, level_sets);
    return;
  }
  for (HeadType head : heads) {
    for (const auto& set : level_sets) {
      for (double lr : lrs) {
        for (double wd : decays) plan.grid.push_back(ProbeCombination{head, set, lr, wd});
      }
    }
  }
}

// Each point once per --train-fraction and per seed (--seeds, else --seed), seeds innermost.
void plan_fractions_and_seeds(const ProbeOptions& o, ProbePlan& plan) {
  const std::vector<double> fractions = parse_double_list(o.train_fraction, {"train-fraction"});
  for (double f : fractions) {
    if (!(f > 0 && f <= 1)) throw UsageError(OptionName{"train-fraction"}, "expected fractions in (0, 1], got " + format_number(f));
  }
  refuse_repeats(fractions, {"train-fraction"}, format_number);
  std::vector<std::uint64_t> seeds{o.seed};
  if (!o.seeds.empty()) {
    if (o.seed != 0) throw UsageError(OptionName{"seeds"}, "give --seed or --seeds, not both");
    seeds.clear();
    for (auto s : parse_int_list(o.seeds, {"seeds"})) {
      if (s < 0) throw UsageError(OptionName{"seeds"}, "seeds are 0 or more");
      seeds.push_back(std::uint64_t(s));
    }
    refuse_repeats(seeds, {"seeds"}, [](std::uint64_t s) { return "seed " + std::to_string(s); });
  }
  plan.seed_mode = seed_modes().parse(o.seed_mode, {"seed-mode"});
  const HeadType head = plan.grid.front().head;
  if (seeds.size() > 1 && (head == HeadType::kKnn || head == HeadType::kLogreg)) {
    throw UsageError(OptionName{"seeds"}, std::string(head_name(head)) + " does not depend on the seed (no random "
                     "initialisation or batch order); give one seed");
  }
  std::vector<ProbeCombination> grid;
  for (const auto& point : plan.grid) {
    for (double f : fractions) {
      for (auto seed : seeds) {
        ProbeCombination c = point;
        c.train_fraction = f;
        c.seed = seed;
        grid.push_back(c);
      }
    }
  }
  plan.grid = std::move(grid);
}

template <typename Text>
std::string distinct_text(const std::vector<ProbeCombination>& grid, Text text) {
  std::vector<std::string> seen;
  std::string out;
  for (const auto& c : grid) {
    const std::string t = text(c);
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    out += (out.empty() ? "" : ",") + t;
  }
  return out;
}

}  // namespace

std::string ProbeCombination::levels_text() const { return level_set_text(levels); }

const EnumTable<TierRequest>& tier_requests() {
  static const EnumTable<TierRequest> table{{TierRequest::kAuto, "auto"},
                                            {TierRequest::kGpu, "gpu"},
                                            {TierRequest::kHost, "host"},
                                            {TierRequest::kStream, "stream"}};
  return table;
}

const EnumTable<StandardizeMode>& standardize_modes() {
  static const EnumTable<StandardizeMode> table{
      {StandardizeMode::kAuto, "auto"}, {StandardizeMode::kOn, "on"}, {StandardizeMode::kOff, "off"}};
  return table;
}

const EnumTable<SeedMode>& seed_modes() {
  static const EnumTable<SeedMode> table{{SeedMode::kFull, "full"}, {SeedMode::kInit, "init"}};
  return table;
}

bool ProbePlan::standardizes(HeadType type) const {
  if (standardize != StandardizeMode::kAuto) return standardize == StandardizeMode::kOn;
  return type == HeadType::kLinear || type == HeadType::kMlp || type == HeadType::kPixelShuffle || type == HeadType::kLogreg;
}

ProbePlan plan_probe(const ProbeOptions& options) {
  check_out(options.out);
  ProbePlan plan;
  plan.options = options;
  plan.task = probe_tasks().parse(options.task, {"task"});
  plan.optimizer = optimizer_kinds().parse(options.optimizer, {"optimizer"});
  plan.schedule = schedules().parse(options.schedule, {"schedule"});
  check_training(options);
  plan.batch_size = resolve_batch_size(options.batch_size, plan.task);
  const std::vector<double> lrs = parse_double_list(options.lr, {"lr"});
  for (double lr : lrs) {
    if (lr <= 0) throw UsageError(OptionName{"lr"}, "learning rates must be positive");
  }
  const std::vector<double> decays = parse_double_list(options.weight_decay, {"weight-decay"});
  for (double wd : decays) {
    if (wd < 0) throw UsageError(OptionName{"weight-decay"}, "must be 0 or more");
  }
  if (!options.hidden.empty()) plan.hidden = parse_int_list(options.hidden, {"hidden"});
  for (auto width : plan.hidden) require_in_range(width, 1, kMaxWidth, {"hidden"}, "widths");
  plan_placement(options, plan);
  plan_inputs_and_loss(options, plan);
  plan_points(options, plan, lrs, decays);
  plan_fractions_and_seeds(options, plan);
  return plan;
}

nlohmann::json resolved_options_json(const ProbePlan& plan) {
  nlohmann::json j = probe_options_to_json(plan.options);
  j["batch_size"] = plan.batch_size;
  return j;
}

std::string grid_heads_text(const std::vector<ProbeCombination>& grid) {
  return distinct_text(grid, [](const ProbeCombination& c) { return std::string(head_name(c.head)); });
}
std::string grid_levels_text(const std::vector<ProbeCombination>& grid) {
  return distinct_text(grid, [](const ProbeCombination& c) { return c.levels_text(); });
}
std::string grid_lrs_text(const std::vector<ProbeCombination>& grid) {
  return distinct_text(grid, [](const ProbeCombination& c) { return exact_number_text(c.lr); });
}
std::string grid_weight_decays_text(const std::vector<ProbeCombination>& grid) {
  return distinct_text(grid, [](const ProbeCombination& c) { return exact_number_text(c.weight_decay); });
}
std::size_t grid_seed_count(const std::vector<ProbeCombination>& grid) {
  std::set<std::uint64_t> seeds;
  for (const auto& c : grid) seeds.insert(c.seed);
  return seeds.size();
}

}  // namespace embcache
