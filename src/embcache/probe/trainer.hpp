// `train-probe`: trains every requested head combination over one pass of the cached features
// per epoch, picks the best by validation, evaluates on test and writes RUN_DIR.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "embcache/probe/probe_plan.hpp"

namespace embcache {

struct ProbeResult {
  nlohmann::json metrics;  // what RUN_DIR/metrics.json holds
  std::string summary;     // the one line printed on stdout
};

// One combination of a finished run, handed to ProbeHooks::on_combination.
struct CombinationOutcome {
  std::size_t index = 0;            // into the plan's grid
  std::string id;                   // "linear levels=2 lr=0.001 wd=0"
  std::string head;
  std::vector<std::string> levels;  // cache level names
  std::string levels_requested;     // the level set as written in --levels ("2", "1+2")
  double lr = 0, weight_decay = 0;
  double C = 0;                        // logreg
  std::int64_t k = 0;                  // knn
  std::uint64_t seed = 0;
  double train_fraction = 1;
  std::int64_t train_rows = 0;         // of the fraction
  std::int64_t best_epoch = 0;         // 0: no result (diverged before its first finite epoch)
  std::int64_t diverged_epoch = 0;     // the epoch its loss stopped being finite (0: never)
  nlohmann::json val, test, test_ci95;  // metrics at the best epoch; test_ci95 with --bootstrap
  nlohmann::json history;               // this combination's rows of metrics.json "history"
  bool best = false;                    // the combination the run picked
  const nlohmann::json* run_metrics = nullptr;  // the whole run's metrics.json, as written
  std::function<void(const std::string& path)> save_head;  // valid during the callback only
};

struct ProbeHooks {
  // Called once per combination after RUN_DIR is written (embcache run gives each its own directory).
  std::function<void(const CombinationOutcome&)> on_combination;
  // Lanes for training banks side by side (probe/bank_lanes.hpp); 0: from the CPUs and --threads.
  std::size_t bank_lanes = 0;
};

// What train_probe checks of the caches before it reads a row: they exist and agree, carry the
// task's labels, and hold every level of the grid, in a shape its head can read.
void preflight_probe(const ProbePlan& plan);


// Writes RUN_DIR/metrics.json, history.csv and head.pt. Throws UsageError/InputError/IoError
// with one line; Interrupted after Ctrl-C (nothing is written then).
ProbeResult train_probe(const ProbePlan& plan, const ProbeHooks& hooks = {});

}  // namespace embcache
