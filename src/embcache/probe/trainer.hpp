// `train-probe`: trains every combination of a plan's grid in one pass (probe/probe_pass.hpp),
// by the family its heads belong to (epochs, logreg fits or k-NN votes), picks the best by
// validation, evaluates on test and writes RUN_DIR (probe/pass_outputs.hpp).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "embcache/probe/probe_plan.hpp"
#include "embcache/probe/run_outputs.hpp"

namespace embcache {

struct ProbeResult {
  nlohmann::json metrics;  // what RUN_DIR/metrics.json holds
  std::string summary;     // the one line printed on stdout
};

// One combination of a finished run, handed to ProbeHooks::on_combination.
struct CombinationOutcome {
  std::size_t index = 0;            // into the plan's grid
  const CombinationResult& result;  // its point and what it reached (as metrics.json's "combinations")
  bool best = false;                // the combination the run picked
  nlohmann::json history;           // this combination's rows of metrics.json "history"
  const nlohmann::json* run_metrics = nullptr;  // the whole run's metrics.json, as written
  std::function<void(const std::string& path)> save_head;  // valid during the callback only; empty: no head
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
