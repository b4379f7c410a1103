// The results of a study: one row per run (from the ledger), written as results.jsonl and
// results.csv, and printed as a table, best first within each probe group.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "embcache/batch/run_ledger.hpp"
#include "embcache/batch/study_config.hpp"

namespace embcache {

// The ledger/results row of a finished run, from its metrics.json.
nlohmann::json result_row(const ProbeRun& run, const nlohmann::json& metrics);
// The row's primary metric on `split` ("val" or "test"); NaN when it has none.
double primary_value(const nlohmann::json& row, const char* split);
// The row's name for people: "NAME", or "NAME (diverged in epoch N)".
std::string run_label(const nlohmann::json& row);
// Finished runs of one probe group that differ only in their seed.
struct SeedGroup {
  std::string name;                         // the runs' name without "seed=...": "probe/lr=0.01"
  std::vector<const nlohmann::json*> rows;  // one per seed, in the order given
};
// The seed groups of `group` among `rows`, in the order their first run comes.
std::vector<SeedGroup> seed_groups(const std::vector<nlohmann::json>& rows, const std::string& group);

// OUTPUT_DIR/results.jsonl and results.csv for every finished run of the study, in config order,
// and results_over_seeds.csv when a group varies its seed.
void write_results(const Study& study, const RunLedger& ledger);
// A plain-text table of the finished runs of `groups`, best validation metric first per group,
// then the spread over seeds where runs differ only in their seed.
std::string results_text(const Study& study, const RunLedger& ledger, const std::set<std::string>& groups);

}  // namespace embcache
