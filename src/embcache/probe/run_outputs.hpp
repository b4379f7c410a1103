// What train-probe writes into its run directory: metrics.json (docs/train-probe.md), history.csv
// and head.pt, and the one line it prints; made from the results of a trained grid.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "embcache/probe/probe_plan.hpp"

namespace embcache {

// One combination of the grid after training: its point as planned and what it reached.
struct CombinationResult {
  ProbeCombination point;           // head, level set as written, lr, weight decay, C, k, fraction, seed
  std::string id;                   // "linear levels=2 lr=0.001 wd=0"
  std::string point_id;             // the id without the seed: results of one point are summarised over seeds
  std::vector<std::string> levels;  // cache level names
  std::int64_t train_rows = 0;      // rows of the fraction trained on
  std::int64_t best_epoch = 0;      // 0: no result (diverged before its first finite epoch)
  std::int64_t diverged_epoch = 0;  // the epoch its training loss stopped being finite (0: never)
  double best_value = NAN;          // the primary validation metric at best_epoch
  nlohmann::json val, test, test_ci95;  // null when there are none
};

// The rest of what metrics.json says about a run.
struct RunFacts {
  nlohmann::json options;           // probe_options_to_json
  std::string task, primary_metric, device;
  std::int64_t num_outputs = 0;
  std::vector<std::string> class_names;
  nlohmann::json splits;            // {"train": {"name", "rows"}, "val": ..., "test": ...}
  nlohmann::json history;           // one row per epoch and combination
  nlohmann::json timing, data;
  nlohmann::json class_weights;     // --class-weights other than none: mode, train counts, weights
  std::vector<std::string> warnings;
};

// metrics.json's "best" for a combination: its point, its best epoch and the rows it trained on.
nlohmann::json best_json(const CombinationResult& best);
// metrics.json of a run whose chosen combination is results[best].
nlohmann::json metrics_json(const RunFacts& facts, const std::vector<CombinationResult>& results, std::size_t best);
// RUN_DIR/history.csv from a metrics.json object: one row per epoch and combination.
std::string history_csv(const nlohmann::json& metrics);
// The one line train-probe prints: the best combination, its metrics, the grid and its speed.
std::string run_summary_line(const nlohmann::json& metrics, const CombinationResult& best, std::int64_t epochs_run,
                             double train_seconds, const std::string& out);
// Writes RUN_DIR as one set: head.pt (by `save_head`; none when it is empty), history.csv and
// metrics.json are staged beside their names, the head loaded back, each file synced, then moved
// into place with metrics.json last, so that a directory holding metrics.json holds the rest of
// the same run. A failure leaves the set that was there, or none; IoError naming `what` and the
// path (`what`: "--out", "run NAME").
void write_run_dir(const std::string& dir, const nlohmann::json& metrics,
                   const std::function<void(const std::string& path)>& save_head, const std::string& what);

}  // namespace embcache
