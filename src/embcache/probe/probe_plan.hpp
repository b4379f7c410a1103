// The typed plan of one train-probe pass: ProbeOptions checked and resolved once (task, heads,
// optimizer, device, tier and budgets as values) and the grid as an explicit list of
// combinations, which the trainer trains in one pass and reports on by index. Built by the CLI
// (the cartesian grid of its lists) and by studies (the runs a pass fuses).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "embcache/probe/class_weights.hpp"
#include "embcache/probe/heads.hpp"
#include "embcache/probe/optimizer.hpp"
#include "embcache/probe/probe_options.hpp"
#include "embcache/probe/temporal_pool.hpp"

namespace embcache {

// One point of a grid: a head over a level set, with a learning rate and a weight decay (logreg:
// with a C; knn: with a k), trained on a fraction of the train split from a seed.
struct ProbeCombination {
  HeadType head = HeadType::kLinear;
  std::vector<std::string> levels;  // level names or indices as written; one head reads them all
  double lr = 1e-3, weight_decay = 0;
  double C = 0;  // logreg only (lr and weight decay are 0 there)
  std::int64_t k = 0;  // knn only (lr and weight decay are 0 there)
  double train_fraction = 1;
  std::uint64_t seed = 0;
  std::string levels_text() const;  // "2" or "1+2", as --levels writes the set
};

enum class TierRequest { kAuto, kGpu, kHost, kStream };
const EnumTable<TierRequest>& tier_requests();  // --tier
enum class StandardizeMode { kAuto, kOn, kOff };
const EnumTable<StandardizeMode>& standardize_modes();  // --standardize
// --seed-mode: each seed a lone run (its own batch order and dropout), or seeds that differ in
// initialisation only and share the first seed's pass.
enum class SeedMode { kFull, kInit };
const EnumTable<SeedMode>& seed_modes();

struct ProbePlan {
  // As given. Below the plan only its numbers, paths and split names are read; its list and
  // enum texts (head, levels, lr, weight decay, task, optimizer, ...) are the typed fields here.
  ProbeOptions options;
  ProbeTask task = ProbeTask::kClassification;
  std::vector<ProbeCombination> grid;
  std::vector<std::int64_t> hidden;  // empty: the head's default
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  Schedule schedule = Schedule::kCosine;
  c10::Device device{c10::kCPU};
  std::int64_t batch_size = 256;  // --batch-size resolved (auto: 64 for dense tasks)
  TierRequest tier = TierRequest::kAuto;
  std::optional<std::int64_t> gpu_budget, host_budget;  // bytes; nullopt: auto
  StandardizeMode standardize = StandardizeMode::kAuto;
  TemporalPool temporal_pool = TemporalPool::kMean;
  ClassWeightMode class_weights = ClassWeightMode::kNone;
  SeedMode seed_mode = SeedMode::kFull;

  // Whether heads of `type` get per-channel standardisation (auto: linear, mlp, pixel-shuffle).
  bool standardizes(HeadType type) const;
};

// Every check that needs no cache (names, ranges, head/task/levels combinations, values listed
// twice); UsageError with one line naming the option. The grid is the cartesian product of
// --head, --levels, --lr and --weight-decay (logreg: --C; knn: --k), --train-fraction and
// --seeds, in that order.
ProbePlan plan_probe(const ProbeOptions& options);

// The options as metrics.json and run ids record them: probe_options_to_json with --batch-size
// resolved to its number, as it was written before "auto" existed (so run ids stay).
nlohmann::json resolved_options_json(const ProbePlan& plan);

// The distinct values of one grid field, as a person writes them: "linear,mlp", "0.001,0.01".
std::string grid_heads_text(const std::vector<ProbeCombination>& grid);
std::string grid_levels_text(const std::vector<ProbeCombination>& grid);
std::string grid_lrs_text(const std::vector<ProbeCombination>& grid);
std::string grid_weight_decays_text(const std::vector<ProbeCombination>& grid);
// How many distinct seeds the grid trains from (more than one: results are summarised over seeds).
std::size_t grid_seed_count(const std::vector<ProbeCombination>& grid);

}  // namespace embcache
