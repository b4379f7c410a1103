#include "embcache/batch/results_table.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "embcache/core/files.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/probe/seed_statistics.hpp"

namespace embcache {
namespace {

const char* kFixed[] = {"name", "id", "group", "cache", "task", "head", "levels", "lr", "weight_decay",
                        "C", "k", "train_fraction", "train_rows", "seed"};

std::string csv_cell(const nlohmann::json& v) {
  std::string s;
  if (v.is_null()) return "";
  if (v.is_string()) s = v.get<std::string>();
  else if (v.is_number_float()) {
    std::ostringstream o;
    o << std::setprecision(8) << v.get<double>();
    s = o.str();
  } else s = v.dump();
  return csv_field(s);
}

nlohmann::json scalars(const nlohmann::json& metrics) {
  nlohmann::json out = nlohmann::json::object();
  if (!metrics.is_object()) return out;
  for (const auto& [k, v] : metrics.items()) {
    if (v.is_number() || v.is_null()) out[k] = v;
  }
  return out;
}

std::vector<nlohmann::json> finished_rows(const Study& study, const RunLedger& ledger) {
  std::vector<nlohmann::json> rows;
  for (const auto& run : study.runs) {
    if (!ledger.finished(run.id)) continue;
    nlohmann::json row = ledger.row(run.id);
    // Rows from before these columns: the run's own options say what they were.
    const ProbeCombination& c = run.plan.grid.front();
    if (!row.contains("seed")) row["seed"] = c.seed;
    if (!row.contains("train_fraction")) row["train_fraction"] = c.train_fraction;
    if (!row.contains("C") && c.head == HeadType::kLogreg) row["C"] = c.C;
    if (!row.contains("k") && c.head == HeadType::kKnn) row["k"] = c.k;
    rows.push_back(row);
  }
  return rows;
}

std::string seed_group_name(const nlohmann::json& row) {
  std::string label;
  for (const auto& [k, v] : row["varying"].items()) {
    if (k == "seed") continue;
    std::string text;  // as the run's name writes it: lists joined by '+'
    for (const auto& item : v.is_array() ? v : nlohmann::json::array({v})) {
      text += (text.empty() ? "" : "+") + (item.is_string() ? item.get<std::string>() : item.dump());
    }
    label += (label.empty() ? "" : ",") + k + "=" + text;
  }
  const std::string group = row["group"].get<std::string>();
  return label.empty() ? group : group + "/" + label;
}

std::string summary_cells(const SeedSummary& s) {
  auto cell = [](double v) {
    std::ostringstream o;
    if (std::isfinite(v)) o << std::setprecision(8) << v;
    return o.str();
  };
  return std::to_string(s.n) + "," + cell(s.mean) + "," + cell(s.std) + "," + cell(s.iqm) + "," + cell(s.ci_low) + "," +
         cell(s.ci_high);
}

std::vector<double> primary_values(const SeedGroup& g, const char* split) {
  std::vector<double> v;
  for (const auto* r : g.rows) v.push_back(primary_value(*r, split));
  return v;
}

// OUTPUT_DIR/results_over_seeds.csv: per seed group, the primary metric summarised over seeds.
void write_seed_summary(const Study& study, const std::vector<nlohmann::json>& rows) {
  std::ostringstream csv;
  csv << "name,group,seeds,metric,val_n,val_mean,val_std,val_iqm,val_ci95_low,val_ci95_high,test_n,test_mean,test_std,"
         "test_iqm,test_ci95_low,test_ci95_high\n";
  bool any = false;
  for (const auto& group : study.groups) {
    for (const auto& g : seed_groups(rows, group)) {
      if (g.rows.size() < 2) continue;
      any = true;
      std::string seeds;
      for (const auto* r : g.rows) seeds += (seeds.empty() ? "" : " ") + (*r)["seed"].dump();
      csv << csv_field(g.name) << "," << csv_field(group) << "," << seeds << ","
          << g.rows.front()->value("primary_metric", std::string()) << "," << summary_cells(summarize_seeds(primary_values(g, "val")))
          << "," << summary_cells(summarize_seeds(primary_values(g, "test"))) << "\n";
    }
  }
  if (any) write_text_atomically(study.output_dir + "/results_over_seeds.csv", csv.str(), "results");
}

}  // namespace

std::vector<SeedGroup> seed_groups(const std::vector<nlohmann::json>& rows, const std::string& group) {
  std::vector<SeedGroup> groups;
  for (const auto& row : rows) {
    if (row["group"] != group) continue;
    const std::string name = seed_group_name(row);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const SeedGroup& g) { return g.name == name; });
    if (it == groups.end()) it = groups.insert(groups.end(), SeedGroup{name, {}});
    it->rows.push_back(&row);
  }
  return groups;
}

double primary_value(const nlohmann::json& row, const char* split) {
  const auto& v = row[split].value(row.value("primary_metric", std::string()), nlohmann::json(nullptr));
  return v.is_number() ? v.get<double>() : NAN;
}

std::string run_label(const nlohmann::json& row) {
  std::string name = row["name"].get<std::string>();
  if (row.contains("diverged_epoch")) name += " (diverged in epoch " + row["diverged_epoch"].dump() + ")";
  return name;
}

nlohmann::json result_row(const ProbeRun& run, const nlohmann::json& m) {
  nlohmann::json row;
  row["name"] = run.name;
  row["id"] = run.id;
  row["group"] = run.group;
  row["cache"] = run.cache_entry.empty() ? run.options.caches.front() : run.cache_entry;
  row["task"] = run.options.task;
  row["head"] = run.options.head;
  row["levels"] = run.options.levels;
  row["lr"] = m["best"]["lr"];
  row["weight_decay"] = m["best"]["weight_decay"];
  for (const char* k : {"C", "k", "train_fraction", "train_rows", "seed"}) {
    if (m["best"].contains(k)) row[k] = m["best"][k];
  }
  row["varying"] = run.varying;
  row["primary_metric"] = m["primary_metric"];
  row["higher_is_better"] = m["primary_metric"] != "rmse";
  row["best_epoch"] = m["best"]["epoch"];
  row["val"] = scalars(m["val"]);
  row["test"] = scalars(m["test"]);
  if (m.contains("test_ci95")) row["test_ci95"] = m["test_ci95"];
  row["seconds"] = m["timing"]["train_seconds"];
  row["samples_per_second"] = m["timing"]["samples_per_second"];
  row["fused_runs"] = m["run"]["fused_runs"];
  if (m["run"].contains("diverged_epoch")) row["diverged_epoch"] = m["run"]["diverged_epoch"];
  row["run_dir"] = run.options.out;
  return row;
}

void write_results(const Study& study, const RunLedger& ledger) {
  const auto rows = finished_rows(study, ledger);
  std::string jsonl;
  for (const auto& row : rows) jsonl += row.dump() + "\n";
  write_text_atomically(study.output_dir + "/results.jsonl", jsonl, "results");

  // Columns: fixed, then options that vary anywhere, then every metric seen.
  std::vector<std::string> varying, val_metrics, test_metrics;
  // A column for the epoch a run diverged in, when one did (its metrics are empty).
  const bool diverged = std::any_of(rows.begin(), rows.end(), [](const nlohmann::json& r) { return r.contains("diverged_epoch"); });
  auto add_unique = [](std::vector<std::string>& v, const std::string& k) {
    if (std::find(v.begin(), v.end(), k) == v.end()) v.push_back(k);
  };
  for (const auto& row : rows) {
    for (const auto& [k, v] : row["varying"].items()) {
      if (std::find(std::begin(kFixed), std::end(kFixed), k) == std::end(kFixed)) add_unique(varying, k);
    }
    for (const auto& [k, v] : row["val"].items()) add_unique(val_metrics, k);
    for (const auto& [k, v] : row["test"].items()) add_unique(test_metrics, k);
  }
  std::ostringstream csv;
  for (const char* k : kFixed) csv << k << ",";
  for (const auto& k : varying) csv << k << ",";
  csv << "best_epoch,";
  if (diverged) csv << "diverged_epoch,";
  for (const auto& k : val_metrics) csv << "val_" << k << ",";
  for (const auto& k : test_metrics) csv << "test_" << k << ",";
  csv << "seconds,samples_per_second,fused_runs,run_dir\n";
  for (const auto& row : rows) {
    for (const char* k : kFixed) csv << csv_cell(row.value(k, nlohmann::json(nullptr))) << ",";
    for (const auto& k : varying) csv << csv_cell(row["varying"].value(k, nlohmann::json(nullptr))) << ",";
    csv << csv_cell(row["best_epoch"]) << ",";
    if (diverged) csv << csv_cell(row.value("diverged_epoch", nlohmann::json(nullptr))) << ",";
    for (const auto& k : val_metrics) csv << csv_cell(row["val"].value(k, nlohmann::json(nullptr))) << ",";
    for (const auto& k : test_metrics) csv << csv_cell(row["test"].value(k, nlohmann::json(nullptr))) << ",";
    csv << csv_cell(row["seconds"]) << "," << csv_cell(row["samples_per_second"]) << "," << csv_cell(row["fused_runs"])
        << "," << csv_cell(row["run_dir"]) << "\n";
  }
  write_text_atomically(study.output_dir + "/results.csv", csv.str(), "results");
  write_seed_summary(study, rows);
}

namespace {

// The spread over seeds of a group's seed groups of two or more runs: mean +- std, IQM and the
// bootstrap interval of the IQM, for val and test.
std::string seeds_text(const std::vector<nlohmann::json>& rows, const std::string& group, const std::string& metric) {
  std::ostringstream out;
  const auto groups = seed_groups(rows, group);
  std::size_t width = 4;
  bool any = false;
  for (const auto& g : groups) {
    if (g.rows.size() < 2) continue;
    any = true;
    width = std::max(width, g.name.size());
  }
  if (!any) return "";
  out << "  over seeds: " << metric << " mean +- std; test IQM [95% bootstrap interval]\n";
  out << "  " << std::left << std::setw(int(width)) << "runs" << "  seeds  " << std::setw(18) << "val" << "  test\n";
  auto cell = [](const SeedSummary& s, bool interval) {
    std::ostringstream c;
    if (s.n == 0) return std::string("-");
    c << std::fixed << std::setprecision(4) << s.mean << " +- " << s.std;
    if (interval) c << ", IQM " << s.iqm << " [" << s.ci_low << ", " << s.ci_high << "]";
    return c.str();
  };
  for (const auto& g : groups) {
    if (g.rows.size() < 2) continue;
    out << "  " << std::left << std::setw(int(width)) << g.name << "  " << std::setw(5) << g.rows.size() << "  " << std::setw(18)
        << cell(summarize_seeds(primary_values(g, "val")), false) << "  " << cell(summarize_seeds(primary_values(g, "test")), true)
        << "\n";
  }
  return out.str();
}

}  // namespace

std::string results_text(const Study& study, const RunLedger& ledger, const std::set<std::string>& groups) {
  std::ostringstream out;
  const auto rows = finished_rows(study, ledger);
  for (const auto& group : study.groups) {
    if (!groups.count(group)) continue;
    std::vector<nlohmann::json> mine;
    for (const auto& row : rows) {
      if (row["group"] == group) mine.push_back(row);
    }
    if (mine.empty()) continue;
    const bool higher = mine.front().value("higher_is_better", true);
    std::stable_sort(mine.begin(), mine.end(), [&](const nlohmann::json& a, const nlohmann::json& b) {
      const double va = primary_value(a, "val"), vb = primary_value(b, "val");
      if (std::isnan(vb)) return !std::isnan(va);
      if (std::isnan(va)) return false;
      return higher ? va > vb : va < vb;
    });
    const std::string metric = mine.front().value("primary_metric", std::string("?"));
    std::size_t width = 4;
    for (const auto& row : mine) width = std::max(width, run_label(row).size());
    out << group << " (best first by val " << metric << ")\n";
    const int col = int(std::max<std::size_t>(10, metric.size() + 6));
    out << "  " << std::left << std::setw(int(width)) << "run" << "  " << std::right << std::setw(col) << ("val " + metric)
        << std::setw(col) << ("test " + metric) << std::setw(7) << "epoch" << "\n";
    for (const auto& row : mine) {
      auto cell = [&](const char* split) {
        const double v = primary_value(row, split);
        std::ostringstream c;
        if (std::isnan(v)) c << "-";
        else c << std::fixed << std::setprecision(4) << v;
        return c.str();
      };
      out << "  " << std::left << std::setw(int(width)) << run_label(row) << "  " << std::right
          << std::setw(col) << cell("val") << std::setw(col) << cell("test") << std::setw(7) << row["best_epoch"].dump() << "\n";
    }
    out << seeds_text(rows, group, metric);
  }
  return out.str();
}

}  // namespace embcache
