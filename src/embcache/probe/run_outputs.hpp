// What train-probe writes into its run directory: metrics.json (docs/train-probe.md), history.csv
// and head.pt, and the one line it prints; made from the results of a trained grid.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace embcache {

// One combination of the grid after training.
struct CombinationResult {
  std::string id;                   // "linear levels=2 lr=0.001 wd=0"
  std::string head;                 // "linear"
  std::vector<std::string> levels;  // cache level names
  double lr = 0, weight_decay = 0;
  std::int64_t best_epoch = 0;      // 0: no result (diverged before its first finite epoch)
  std::int64_t diverged_epoch = 0;
  double best_value = 0;            // the primary validation metric at best_epoch
  nlohmann::json val, test, test_ci95;  // null when there are none
  double C = 0;                     // logreg
  std::int64_t k = 0;               // knn
  std::string point;                // the id without the seed: results of one point are summarised over seeds
  std::uint64_t seed = 0;
  double train_fraction = 1;
  std::int64_t train_rows = 0;      // rows of the fraction trained on
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

// metrics.json of a run whose chosen combination is results[best].
nlohmann::json metrics_json(const RunFacts& facts, const std::vector<CombinationResult>& results, std::size_t best);
// RUN_DIR/history.csv from a metrics.json object: one row per epoch and combination.
std::string history_csv(const nlohmann::json& metrics);
// The one line train-probe prints: the best combination, its metrics, the grid and its speed.
std::string run_summary_line(const nlohmann::json& metrics, const CombinationResult& best, std::int64_t epochs_run,
                             double train_seconds, const std::string& out);
// Writes RUN_DIR (head.pt by `save_head`, none when it is empty; then history.csv and
// metrics.json, each atomically);
// IoError naming --out when the directory cannot be made.
void write_run_dir(const std::string& dir, const nlohmann::json& metrics,
                   const std::function<void(const std::string& path)>& save_head);

}  // namespace embcache
