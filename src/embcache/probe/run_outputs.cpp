#include "embcache/probe/run_outputs.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/probe/heads.hpp"
#include "embcache/probe/seed_statistics.hpp"

namespace embcache {
namespace {

nlohmann::json or_empty(const nlohmann::json& j) { return j.is_null() ? nlohmann::json::object() : j; }

// logreg's C or knn's k, the one parameter those heads have instead of lr and weight decay.
void add_head_parameter(nlohmann::json& row, const ProbeCombination& p) {
  if (p.head == HeadType::kLogreg) row["C"] = p.C;
  if (p.head == HeadType::kKnn) row["k"] = p.k;
}

// Per point (a combination without its seed) with more than one seed: each metric summarised
// over the seeds, in the order the points first appear.
nlohmann::json over_seeds(const std::vector<CombinationResult>& results, const std::string& primary) {
  std::vector<std::string> points;
  std::map<std::string, std::vector<const CombinationResult*>> of;
  for (const auto& r : results) {
    if (!of.count(r.point_id)) points.push_back(r.point_id);
    of[r.point_id].push_back(&r);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& point : points) {
    const auto& mine = of[point];
    const CombinationResult& first = *mine.front();
    const ProbeCombination& p = first.point;
    nlohmann::json row = {{"combination", point}, {"head", head_name(p.head)}, {"levels", first.levels}, {"lr", p.lr},
                          {"weight_decay", p.weight_decay}, {"train_fraction", p.train_fraction},
                          {"train_rows", first.train_rows}};
    add_head_parameter(row, p);
    std::vector<std::uint64_t> seeds;
    std::vector<double> val;
    std::map<std::string, std::vector<double>> test;
    std::vector<std::string> test_keys;
    for (const auto* r : mine) {
      seeds.push_back(r->point.seed);
      val.push_back(r->best_epoch > 0 ? r->best_value : NAN);
      if (!r->test.is_object()) continue;
      for (const auto& [k, v] : r->test.items()) {
        if (!v.is_number()) continue;
        if (!test.count(k)) test_keys.push_back(k);
        test[k].push_back(v.get<double>());
      }
    }
    row["seeds"] = seeds;
    row["val"] = {{primary, summarize_seeds(val).to_json()}};
    row["test"] = nlohmann::json::object();
    for (const auto& k : test_keys) row["test"][k] = summarize_seeds(test[k]).to_json();
    out.push_back(row);
  }
  return out;
}

}  // namespace

nlohmann::json best_json(const CombinationResult& best) {
  const ProbeCombination& p = best.point;
  nlohmann::json j = {{"combination", best.id}, {"head", head_name(p.head)}, {"levels", best.levels},
                      {"lr", p.lr}, {"weight_decay", p.weight_decay}, {"epoch", best.best_epoch}};
  add_head_parameter(j, p);
  j["train_fraction"] = p.train_fraction;
  j["train_rows"] = best.train_rows;
  j["seed"] = p.seed;
  return j;
}

nlohmann::json metrics_json(const RunFacts& facts, const std::vector<CombinationResult>& results, std::size_t best) {
  const CombinationResult& winner = results.at(best);
  nlohmann::json j;
  j["embcache_version"] = EMBCACHE_VERSION;
  j["options"] = facts.options;
  j["task"] = facts.task;
  j["num_outputs"] = facts.num_outputs;
  if (!facts.class_names.empty()) j["class_names"] = facts.class_names;
  j["primary_metric"] = facts.primary_metric;
  j["splits"] = facts.splits;
  j["device"] = facts.device;
  j["best"] = best_json(winner);
  j["val"] = winner.val;
  j["test"] = or_empty(winner.test);
  if (!winner.test_ci95.is_null()) j["test_ci95"] = winner.test_ci95;
  nlohmann::json grid = nlohmann::json::array();
  for (const auto& c : results) {
    const ProbeCombination& p = c.point;
    nlohmann::json row = {{"combination", c.id}, {"head", head_name(p.head)}, {"levels", c.levels}, {"lr", p.lr},
                          {"weight_decay", p.weight_decay}, {"best_epoch", c.best_epoch},
                          {"val", or_empty(c.val)}, {"test", or_empty(c.test)}};
    if (!c.test_ci95.is_null()) row["test_ci95"] = c.test_ci95;
    if (c.diverged_epoch > 0) row["diverged_epoch"] = c.diverged_epoch;
    add_head_parameter(row, p);
    row["train_fraction"] = p.train_fraction;
    row["train_rows"] = c.train_rows;
    row["seed"] = p.seed;
    grid.push_back(row);
  }
  j["combinations"] = grid;
  std::set<std::uint64_t> seeds;
  for (const auto& c : results) seeds.insert(c.point.seed);
  if (seeds.size() > 1) {
    j["over_seeds"] = over_seeds(results, facts.primary_metric);
    for (const auto& row : j["over_seeds"]) {
      if (row["combination"] == winner.point_id) j["best"]["over_seeds"] = {{"val", row["val"]}, {"test", row["test"]}};
    }
  }
  j["history"] = facts.history;
  j["timing"] = facts.timing;
  j["data"] = facts.data;
  if (!facts.class_weights.is_null()) j["class_weights"] = facts.class_weights;
  if (!facts.warnings.empty()) j["warnings"] = facts.warnings;
  return j;
}

std::string history_csv(const nlohmann::json& metrics) {
  const std::string primary = metrics.value("primary_metric", std::string());
  std::ostringstream csv;
  csv << "epoch,combination,head,levels,lr,weight_decay,train_loss,val_" << primary << ",seconds,train_fraction,seed\n";
  for (const auto& row : metrics["history"]) {
    const auto& v = row["val"].value(primary, nlohmann::json(nullptr));
    csv << row["epoch"].get<std::int64_t>() << "," << csv_field(row["combination"].get<std::string>()) << ","
        << row["head"].get<std::string>() << "," << row["levels"].get<std::string>() << ","
        << format_number(row["lr_base"].get<double>()) << "," << format_number(row["weight_decay"].get<double>()) << ","
        << format_number(row["train_loss"].get<double>()) << "," << (v.is_number() ? format_number(v.get<double>()) : "")
        << "," << format_number(row["seconds"].get<double>()) << "," << format_number(row.value("train_fraction", 1.0)) << ","
        << row.value("seed", std::uint64_t(0)) << "\n";
  }
  return csv.str();
}

std::string run_summary_line(const nlohmann::json& metrics, const CombinationResult& best, std::int64_t epochs_run,
                             double train_seconds, const std::string& out) {
  const std::string primary = metrics.value("primary_metric", std::string());
  const std::size_t heads = metrics["combinations"].size();
  std::ostringstream line;
  line << std::fixed << std::setprecision(4);  // metrics as in a study's results table: 0.6840
  line << "train-probe: best " << best.id << " (epoch " << best.best_epoch << "): val " << primary << " " << best.best_value;
  if (metrics["test"].contains(primary) && metrics["test"][primary].is_number()) {
    line << ", test " << primary << " " << metrics["test"][primary].get<double>();
  }
  if (metrics["best"].contains("over_seeds")) {
    const auto& v = metrics["best"]["over_seeds"]["val"][primary];
    if (v["mean"].is_number()) {
      line << "; over " << v["n"].get<std::int64_t>() << " seeds val " << primary << " " << v["mean"].get<double>() << " +- "
           << v["std"].get<double>();
    }
    const auto& t = metrics["best"]["over_seeds"]["test"];
    if (t.contains(primary) && t[primary]["mean"].is_number()) {
      line << ", test " << t[primary]["mean"].get<double>() << " +- " << t[primary]["std"].get<double>();
    }
  }
  line << "; " << heads << " head" << (heads == 1 ? "" : "s") << ", " << epochs_run << " epoch" << (epochs_run == 1 ? "" : "s")
       << ", " << std::fixed << std::setprecision(1) << train_seconds << " s, " << std::setprecision(0)
       << metrics["timing"]["samples_per_second"].get<double>() << " samples/s, tier " << metrics["data"]["tier"].get<std::string>()
       << " -> " << out;
  return line.str();
}

namespace {

// The set is staged in a folder of this process's own inside the run directory until it is
// whole. Each staged file is NAME.new: TorchScript names the archive's root folder after the
// file's name less its last extension, so a head staged as head.pt.new holds the same bytes as
// one saved straight to head.pt.
std::string staging_dir(const std::string& dir) { return dir + "/.staging." + std::to_string(::getpid()); }

void write_staged(const std::string& path, const std::string& text, const std::string& what) {
  {
    errno = 0;  // the failed open or write leaves its reason here
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      throw IoError(what + " " + path + ": cannot write (" +
                    (errno ? std::strerror(errno) : "disk full, or the directory not writable?") + ")");
    }
  }
  sync_path(path);
}

// Removes `path` if it is there; an error other than its absence is an IoError.
void remove_if_there(const std::string& path, const std::string& what) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (ec) throw IoError(what + " " + path + ": cannot remove it (" + ec.message() + ")");
}

}  // namespace

void write_run_dir(const std::string& dir, const nlohmann::json& metrics,
                   const std::function<void(const std::string& path)>& save_head, const std::string& what) {
  const std::string staging = staging_dir(dir);
  make_directories(staging, what);
  const std::string head = staging + "/head.pt.new", history = staging + "/history.csv.new",
                    json = staging + "/metrics.json.new";
  try {
    if (save_head) {
      save_head(head);
      check_head_loads(head);
      sync_path(head);
    }
    write_staged(history, history_csv(metrics), what);
    write_staged(json, metrics.dump(2) + "\n", what);
    // The set changes under metrics.json, which goes first and comes back last: a reader who
    // finds metrics.json finds the head and history of the same run beside it.
    remove_if_there(dir + "/metrics.json", what);
    if (save_head) {
      move_into_place(head, dir + "/head.pt", what);
    } else {
      remove_if_there(dir + "/head.pt", what);  // an earlier run's head would not be this run's
    }
    move_into_place(history, dir + "/history.csv", what);
    move_into_place(json, dir + "/metrics.json", what);
    sync_path(dir);
  } catch (...) {
    for (const std::string& path : {head, history, json}) std::remove(path.c_str());
    std::remove(staging.c_str());
    throw;
  }
  remove_if_there(staging, what);
}

}  // namespace embcache
