#include "embcache/probe/pass_outputs.hpp"

#include "embcache/host/memory_info.hpp"
#include "embcache/probe/probe_pass.hpp"
#include "embcache/probe/run_outputs.hpp"

namespace embcache {
namespace {

// How the features were fed: the three splits' feeds together, the tiers and the budgets.
nlohmann::json data_json(const ProbePass& pass) {
  FeedStats total = pass.train_feed->stats();
  for (const FeatureFeed* f : {pass.val_feed.get(), pass.test_feed.get()}) {
    if (!f) continue;
    const FeedStats& s = f->stats();
    total.bytes_resident += s.bytes_resident;
    total.bytes_read += s.bytes_read;
    total.read_seconds += s.read_seconds;
    total.rows_read += s.rows_read;
    total.rows_used += s.rows_used;
  }
  nlohmann::json j = total.to_json(pass.tier);
  const double waited = pass.train_feed->stats().wait_seconds - pass.wait_before_training;
  j["wait_fraction"] = pass.train_seconds > 0 ? waited / pass.train_seconds : 0.0;
  j["host_memory_budget"] = pass.host_budget;
  j["val_tier"] = tier_name(pass.val_tier);
  if (pass.device.is_cuda()) j["gpu_memory_budget"] = pass.gpu_budget;
  j["bytes_needed_resident"] = pass.needed;
  j["peak_rss_bytes"] = peak_rss_bytes();
  return j;
}

// One fraction: as before fractions existed; several: one object per fraction.
nlohmann::json class_weights_json(const ProbePass& pass) {
  nlohmann::json out;
  for (const auto& f : pass.fractions) {
    nlohmann::json j = f.class_weights.to_json();
    if (pass.fractions.size() == 1) return j;
    j["train_fraction"] = f.fraction;
    out.push_back(j);
  }
  return out;
}

RunFacts run_facts(const ProbePass& pass) {
  const ProbeData& data = *pass.data;
  RunFacts facts;
  facts.options = resolved_options_json(pass.plan);
  facts.task = task_name(pass.task);
  facts.num_outputs = data.num_outputs();
  facts.class_names = data.caches().front()->label_kinds().class_names;
  facts.primary_metric = pass.primary;
  facts.splits = {{"train", {{"name", data.train().name}, {"rows", data.train().size()}}},
                  {"val", {{"name", data.val().name}, {"rows", data.val().size()}}},
                  {"test", {{"name", data.test().name}, {"rows", data.test().size()}}}};
  facts.device = pass.device.str();
  facts.history = pass.history;
  const double train_seconds = pass.train_seconds;
  facts.timing = {{"train_seconds", train_seconds}, {"load_seconds", pass.load_seconds},
                  {"total_seconds", seconds_since(pass.t_start)}, {"epochs", pass.epochs_run},
                  {"samples_per_second", train_seconds > 0 ? double(pass.samples_trained) / train_seconds : 0.0},
                  {"heads", pass.combos.size()}, {"banks", pass.banks.size()}, {"bank_lanes", pass.bank_lanes},
                  {"threads", pass.threads}};
  facts.data = data_json(pass);
  if (pass.plan.class_weights != ClassWeightMode::kNone) facts.class_weights = class_weights_json(pass);
  facts.warnings = data.warnings();
  facts.warnings.insert(facts.warnings.end(), pass.warnings.begin(), pass.warnings.end());
  return facts;
}

// Each combination's outcome, by its index in the plan's grid (a study writes a run of each).
void report_combinations(const ProbePass& pass, const nlohmann::json& metrics, const HeadSaverOf& saver_of,
                         const std::function<void(const CombinationOutcome&)>& on_combination) {
  for (std::size_t i = 0; i < pass.combos.size(); ++i) {
    const Combination& c = pass.combos[i];
    nlohmann::json history = nlohmann::json::array();
    for (const auto& row : pass.history) {
      if (row["combination"] == c.result.id) history.push_back(row);
    }
    on_combination(CombinationOutcome{i, c.result, i == pass.best, std::move(history), &metrics, saver_of(c)});
  }
}

}  // namespace

ProbeResult write_pass_outputs(const ProbePass& pass, const HeadSaverOf& saver_of,
                               const std::function<void(const CombinationOutcome&)>& on_combination) {
  std::vector<CombinationResult> results;
  for (const auto& c : pass.combos) results.push_back(c.result);
  const CombinationResult& best = results[pass.best];
  const nlohmann::json metrics = metrics_json(run_facts(pass), results, pass.best);
  write_run_dir(pass.options.out, metrics, saver_of(pass.combos[pass.best]), "--out");
  if (on_combination) report_combinations(pass, metrics, saver_of, on_combination);
  return {metrics, run_summary_line(metrics, best, pass.epochs_run, pass.train_seconds, pass.options.out)};
}

}  // namespace embcache
