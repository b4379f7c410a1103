#include "embcache/batch/study_runner.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <fstream>
#include <memory>
#include <optional>
#include <set>

#include "embcache/batch/pass_fusion.hpp"
#include "embcache/batch/report.hpp"
#include "embcache/batch/results_table.hpp"
#include "embcache/batch/run_ledger.hpp"
#include "embcache/batch/slurm_executor.hpp"
#include "embcache/batch/study_config.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/file_lock.hpp"
#include "embcache/core/files.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/dataset/window_shard.hpp"
#include "embcache/pipeline/precompute.hpp"
#include "embcache/probe/run_outputs.hpp"
#include "embcache/probe/trainer.hpp"
#include "embcache/store/cache_reader.hpp"
#include "embcache/store/cache_store.hpp"

namespace embcache {
namespace {

namespace fs = std::filesystem;

std::string join(const std::vector<std::string>& values, const char* sep) {
  std::string s;
  for (std::size_t i = 0; i < values.size(); ++i) s += (i ? sep : "") + values[i];
  return s;
}

// "head linear,mlp, levels 1,2, lr 0.001,0.01, weight decay 0": a pass's grid for people.
std::string grid_text(const std::vector<ProbeCombination>& grid) {
  return "head " + grid_heads_text(grid) + ", levels " + grid_levels_text(grid) + ", lr " + grid_lrs_text(grid) +
         ", weight decay " + grid_weight_decays_text(grid);
}

std::string cache_state(const PrecomputeEntry& entry) {
  const std::string& out = entry.options.out;
  if (!fs::exists(out)) {
    try {
      const PrecomputeEstimate e = estimate_precompute(entry.plan);
      return "not computed yet; estimated " + std::to_string(e.crops) + " crops from " + std::to_string(e.windows) +
             " windows x " + format_bytes(double(e.bytes_per_crop)) + " = " +
             format_bytes(double(e.crops) * double(e.bytes_per_crop)) + " of features (levels " + join(e.levels, ", ") + ")";
    } catch (const Error& err) {
      return std::string("not computed yet; cannot estimate its size: ") + err.what();
    }
  }
  try {
    CacheReader reader(out);
    return "exists: " + std::to_string(reader.rows()) + " rows, " + format_bytes(double(cache_bytes(reader))) +
           " (a rerun computes only what is missing or changed)";
  } catch (const Error& e) {
    return std::string("cannot be read: ") + e.what();
  }
}

// Per-run metrics.json: the pass's file narrowed to this run's combination.
nlohmann::json run_metrics(const nlohmann::json& pass, const ProbeRun& run, const CombinationOutcome& c, std::size_t fused) {
  const CombinationResult& r = c.result;
  const nlohmann::json& mine = pass["combinations"][c.index];
  nlohmann::json j = pass;
  j["options"] = resolved_options_json(run.plan);
  j["best"] = best_json(r);
  j.erase("over_seeds");  // the pass's summary over seeds: the study's results table makes its own
  j["val"] = mine["val"];
  j["test"] = mine["test"];
  j.erase("test_ci95");
  if (!r.test_ci95.is_null()) j["test_ci95"] = r.test_ci95;
  j["history"] = c.history;
  j.erase("combinations");
  j["run"] = {{"name", run.name}, {"id", run.id}, {"group", run.group}, {"fused_runs", fused}};
  if (r.diverged_epoch > 0) j["run"]["diverged_epoch"] = r.diverged_epoch;
  return j;
}

// The entries `--only` selects; probes bring the precomputes they read.
struct Selection {
  std::set<std::string> precomputes, groups;
};

Selection select_entries(const Study& study, const std::vector<std::string>& only) {
  Selection selected;
  if (only.empty()) {
    for (const auto& p : study.precomputes) selected.precomputes.insert(p.name);
    selected.groups.insert(study.groups.begin(), study.groups.end());
    return selected;
  }
  for (const auto& name : only) {
    const bool is_pre = std::any_of(study.precomputes.begin(), study.precomputes.end(), [&](const auto& p) { return p.name == name; });
    const bool is_group = std::find(study.groups.begin(), study.groups.end(), name) != study.groups.end();
    if (!is_pre && !is_group) {
      std::string names;
      for (const auto& p : study.precomputes) names += (names.empty() ? "" : ", ") + p.name;
      for (const auto& g : study.groups) names += (names.empty() ? "" : ", ") + g;
      throw UsageError(OptionName{"only"}, name + ": no precompute or probe entry of that name in " + study.path +
                       " (entries: " + names + ")");
    }
    if (is_pre) selected.precomputes.insert(name);
    if (is_group) selected.groups.insert(name);
  }
  for (const auto& run : study.runs) {
    if (selected.groups.count(run.group) && !run.cache_entry.empty()) selected.precomputes.insert(run.cache_entry);
  }
  return selected;
}

// One `embcache run` per output_dir: two would train the same runs twice into the same pass
// directories and append each result to the ledger twice.
std::unique_ptr<FileLock> lock_output_dir(const Study& study) {
  std::error_code ec;
  fs::create_directories(study.output_dir, ec);
  if (ec) throw IoError("output_dir " + study.output_dir + ": cannot create (" + ec.message() + ")");
  return std::make_unique<FileLock>(study.output_dir + "/run.lock",
                                    "output_dir " + study.output_dir + ": another `embcache run` is working in it; "
                                    "wait for it to finish, or give this study another output_dir",
                                    "output_dir must be writable");
}

// The content ids of the caches a run reads, as the ledger records them ("a,b"). `memo` keeps
// what was read already.
std::string caches_content(const ProbeOptions& o, std::map<std::string, std::string>* memo) {
  std::string content;
  for (const auto& cache : o.caches) {
    auto [it, fresh] = memo->try_emplace(cache);
    if (fresh) {
      try {
        if (fs::exists(cache)) it->second = CacheReader(cache).content_id().value_or("");
      } catch (const Error&) {  // unreadable: not what any run was trained on; the pass will say why
      }
    }
    content += (content.empty() ? "" : ",") + it->second;
  }
  return content;
}

void say_stale(std::size_t n, const char* more, const std::string& which_rows) {
  std::printf("%zu %sfinished run%s trained on rows %s; %s again\n", n, more, n == 1 ? " was" : "s were",
              which_rows.c_str(), n == 1 ? "it runs" : "they run");
}

// Which selected runs are finished, which are stale, and how the rest fuse into passes. A finished
// run trained on other rows than its caches hold now (a dataset grew, pixels changed, a cache was
// rebuilt) is stale and runs again.
class StudyPlan {
 public:
  StudyPlan(const Study& study, const RunLedger& ledger, const Selection& selected, bool force)
      : study_(study), ledger_(ledger), selected_(selected), force_(force) {}

  // Plans again from the caches as they are now (after the precomputes ran).
  void update() {
    content_memo_.clear();
    pending_.clear();
    passes.clear();
    finished = stale = selected_runs = 0;
    for (std::size_t i = 0; i < study_.runs.size(); ++i) {
      const ProbeRun& run = study_.runs[i];
      if (!selected_.groups.count(run.group)) continue;
      ++selected_runs;
      bool current = ledger_.finished(run.id) && !force_;
      if (current && ledger_.row(run.id).contains("cache_content") &&
          ledger_.row(run.id)["cache_content"] != content_of(run.options)) {
        current = false;
        ++stale;
      }
      if (current) {
        ++finished;
      } else {
        pending_.push_back(i);
      }
    }
    passes = fuse_runs(study_, pending_);
  }

  // The content ids of the caches a run reads, as the ledger records them.
  std::string content_of(const ProbeOptions& o) { return caches_content(o, &content_memo_); }

  std::size_t pending() const { return pending_.size(); }

  std::vector<Pass> passes;
  std::size_t finished = 0, stale = 0, selected_runs = 0;

 private:
  const Study& study_;
  const RunLedger& ledger_;
  const Selection& selected_;
  bool force_;
  std::vector<std::size_t> pending_;
  std::map<std::string, std::string> content_memo_;
};

void print_dry_run(const Study& study, const Selection& selected, const StudyPlan& plan) {
  for (const auto& p : study.precomputes) {
    if (!selected.precomputes.count(p.name)) continue;
    std::printf("precompute %s: %s over %s -> %s\n  %s\n", p.name.c_str(), p.options.encoder.c_str(),
                p.options.dataset.c_str(), p.options.out.c_str(), cache_state(p).c_str());
  }
  for (std::size_t i = 0; i < plan.passes.size(); ++i) {
    const auto& pass = plan.passes[i];
    const auto& o = pass.plan.options;
    std::printf("pass %zu: %s, %zu run%s in one pass: task %s, %s, %lld epoch%s, cache %s\n", i + 1,
                study.runs[pass.runs.front()].group.c_str(), pass.runs.size(), pass.runs.size() == 1 ? "" : "s",
                o.task.c_str(), grid_text(pass.plan.grid).c_str(), static_cast<long long>(o.epochs),
                o.epochs == 1 ? "" : "s", o.caches.front().c_str());
    for (auto r : pass.runs) std::printf("  %s  %s\n", study.runs[r].id.c_str(), study.runs[r].name.c_str());
    // Where its caches exist already, the pass can be checked as the run will check it.
    if (std::all_of(o.caches.begin(), o.caches.end(), [](const std::string& c) { return fs::exists(c); })) {
      try {
        preflight_probe(pass.plan);
      } catch (const Error& e) {
        std::printf("  will fail: %s\n", e.what());
      }
    }
  }
  std::fflush(stdout);
}

PrecomputeSummary run_entry_precompute(const Study& study, const PrecomputeEntry& p, const PrecomputePlan& plan) {
  PrecomputeSummary summary;
  try {
    summary = run_precompute(plan);
  } catch (const SignatureMismatch& e) {
    // "overwrite": true would rebuild the cache, and retrain its runs, at every rerun.
    throw InputError(study.path + ": precompute \"" + p.name + "\": " + e.mismatch +
                     "; delete it to rebuild it with this entry's options (the runs that read it then train "
                     "again), or give the entry another \"out\"" + e.note);
  }
  std::printf("%s%s\n", plan.shard.whole() ? "" : ("shard " + plan.shard.text() + ": ").c_str(), summary.one_line().c_str());
  std::fflush(stdout);
  return summary;
}

void run_precomputes(const Study& study, const Selection& selected) {
  for (const auto& p : study.precomputes) {
    if (!selected.precomputes.count(p.name)) continue;
    std::error_code ec;
    fs::create_directories(fs::path(p.options.out).parent_path(), ec);
    std::printf("== precompute %s ==\n", p.name.c_str());
    std::fflush(stdout);
    // "shards": N runs its shards one after another: the cache gets the parts a job array gives it.
    for (std::int64_t shard = 0; shard < p.shards; ++shard) {
      PrecomputePlan plan = p.plan;
      plan.shard = {shard, p.shards};
      const PrecomputeSummary summary = run_entry_precompute(study, p, plan);
      if (summary.interrupted) {
        throw Interrupted("interrupted during precompute " + p.name + "; rerun the same command to continue");
      }
    }
  }
}

// The caches exist now: a level or a label a pass needs and its cache lacks stops the study
// before any pass trains, not after the passes before it have.
void preflight_passes(const Study& study, const std::vector<Pass>& passes) {
  for (const Pass& pass : passes) {
    try {
      preflight_probe(pass.plan);
    } catch (const Error& e) {
      throw Error(e.code(), study.path + ": probe entry \"" + study.runs[pass.runs.front()].group + "\": " + e.what() +
                                "; no probe pass was run");
    }
  }
}

// Writes one run's directory from its combination of the pass; returns its ledger row.
nlohmann::json write_run(const ProbeRun& run, const CombinationOutcome& c, std::size_t fused, const std::string& trained_on) {
  const nlohmann::json m = run_metrics(*c.run_metrics, run, c, fused);
  // A run that diverged before its first finite epoch has no head, nor a k-NN whose train split was streamed.
  const bool head = c.result.best_epoch > 0 && c.save_head;
  write_run_dir(run.options.out, m, head ? c.save_head : nullptr, "run " + run.name);
  nlohmann::json row = result_row(run, m);
  row["cache_content"] = trained_on;
  return row;
}

// Trains one pass, writes its runs' directories and returns their ledger rows.
std::vector<nlohmann::json> train_pass(const Study& study, const Pass& pass, const std::string& trained_on) {
  std::vector<nlohmann::json> rows;
  ProbeHooks hooks;
  hooks.on_combination = [&](const CombinationOutcome& c) {
    rows.push_back(write_run(study.runs[pass.runs.at(c.index)], c, pass.runs.size(), trained_on));
  };
  const ProbeResult result = train_probe(pass.plan, hooks);
  std::printf("%s\n", result.summary.c_str());
  std::fflush(stdout);
  if (rows.size() != pass.runs.size()) {
    throw std::logic_error("run: a pass finished without results for every run it fused");
  }
  return rows;
}

// Trains one pass and records each of its runs in the ledger as soon as the pass ends.
void run_pass(const Study& study, const Pass& pass, const std::string& trained_on, RunLedger& ledger) {
  ledger.append(train_pass(study, pass, trained_on));
  write_results(study, ledger);
}

// --- Slurm: what the jobs run, and the run that submits and collects them (docs/scale-out.md) ---

// A task of a precompute entry's job array: its shard SLURM_ARRAY_TASK_ID of "shards".
void run_worker_precompute(const Study& study, const std::string& name) {
  const auto it = std::find_if(study.precomputes.begin(), study.precomputes.end(), [&](const auto& p) { return p.name == name; });
  if (it == study.precomputes.end()) throw InputError(study.path + ": no precompute entry \"" + name + "\" (was the study edited after it was submitted?)");
  const std::int64_t task = slurm_array_task().second;
  if (task < 0 || task >= it->shards) {
    throw UsageError(OptionName{"task"}, "array task " + std::to_string(task) + " is not a shard of precompute \"" + name +
                     "\", which has " + std::to_string(it->shards));
  }
  PrecomputePlan plan = it->plan;
  plan.shard = {task, it->shards};
  std::error_code ec;
  fs::create_directories(fs::path(plan.out).parent_path(), ec);
  if (run_entry_precompute(study, *it, plan).interrupted) throw Interrupted("interrupted during precompute " + name);
}

// A pass job: trains the runs, writes their directories, and leaves their ledger rows in
// OUTPUT_DIR/slurm/results for the `embcache run` that collects it.
void run_worker_pass(const Study& study, const std::vector<std::string>& ids, const std::string& results) {
  std::vector<std::size_t> runs;
  for (const auto& id : ids) {
    const auto it = std::find_if(study.runs.begin(), study.runs.end(), [&](const ProbeRun& r) { return r.id == id; });
    if (it == study.runs.end()) throw InputError(study.path + ": no run with id " + id + " (was the study edited after it was submitted?)");
    runs.push_back(std::size_t(it - study.runs.begin()));
  }
  const std::vector<Pass> passes = fuse_runs(study, runs);
  preflight_passes(study, passes);
  std::string lines;
  std::map<std::string, std::string> memo;
  for (const Pass& pass : passes) {
    for (const auto& row : train_pass(study, pass, caches_content(pass.plan.options, &memo))) lines += row.dump() + "\n";
  }
  write_text_atomically(results, lines, "the results of this pass");
}

// Which shards of a precompute entry a Slurm run submits: those with windows the cache lacks,
// whose newest part is marked interrupted, or whose last run died with commits (all with --force).
std::vector<std::int64_t> shards_to_submit(const PrecomputeEntry& entry, bool force) {
  std::vector<std::int64_t> all;
  for (std::int64_t i = 0; i < entry.shards; ++i) all.push_back(i);
  if (force || !fs::exists(entry.options.out)) return all;
  std::set<std::int64_t> todo;
  try {
    const CacheReader cache(entry.options.out, CacheReader::MissingParts::kSkip);
    std::set<std::pair<std::string, std::string>> cached;
    const CacheIndex index = cache.read_index(0, cache.rows(), {true, false, false});
    for (std::size_t r = 0; r < index.windows.size(); ++r) cached.insert({index.groups[r], index.windows[r]});
    const auto source = open_window_source(entry.plan);  // lists windows; reads no pixels
    for (const auto& w : source->windows()) {
      if (!cached.count({w.group, w.name})) todo.insert(shard_of_window(w.group, w.name, entry.shards));
    }
    std::map<std::int64_t, bool> newest_complete;
    for (const CachePart& part : cache.parts().parts) {
      const ShardSpec spec = shard_from_text(part.shard);
      if (spec.count == entry.shards) newest_complete[spec.index] = part.complete;
    }
    for (const auto& [shard, complete] : newest_complete) {
      if (!complete) todo.insert(shard);
    }
    for (const RunState& run : run_states(entry.options.out)) {
      const ShardSpec spec = shard_from_text(run.shard);
      if (run.records > 0 && spec.count == entry.shards) todo.insert(spec.index);
    }
  } catch (const Error&) {
    return all;  // unreadable: the tasks will say why
  }
  return {todo.begin(), todo.end()};
}

// Appends the ledger rows of the pass tasks that succeeded; returns the lines of those that left none.
std::vector<std::string> collect(const SlurmExecutor& slurm, const SlurmOutcome& outcome, RunLedger& ledger) {
  std::vector<std::string> missing;
  for (const auto& [job, task] : outcome.succeeded) {
    if (job->kind != "pass") continue;
    const std::string file = slurm.results_file(job->id, task);
    std::ifstream in(file);
    std::vector<nlohmann::json> rows;
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    }
    if (rows.empty()) {
      missing.push_back("job " + job->id + "_" + std::to_string(task) + " (" + job->name + ") left no results in " + file +
                        "; log: " + job->log_of(task));
      continue;
    }
    ledger.append(rows);
    std::error_code ec;
    fs::remove(file, ec);
  }
  return missing;
}

// Submits one round: the precompute arrays (first round only) and the passes, each pass after the
// arrays of its caches.
std::vector<SubmittedJob> submit_round(SlurmExecutor& slurm, const Study& study, const Selection& selected,
                                       const StudyPlan& plan, bool precomputes, bool force) {
  std::vector<SubmittedJob> jobs;
  std::map<std::string, std::string> array_of_cache;
  for (const auto& p : study.precomputes) {
    if (!precomputes || !selected.precomputes.count(p.name)) continue;
    const std::vector<std::int64_t> shards = shards_to_submit(p, force);
    if (shards.empty()) {
      std::printf("slurm: precompute %s: every shard is done\n", p.name.c_str());
      continue;
    }
    jobs.push_back(slurm.submit("precompute", "precompute " + p.name, "precompute=" + p.name, shards, {}));
    array_of_cache[p.options.out] = jobs.back().id;
  }
  for (std::size_t i = 0; i < plan.passes.size(); ++i) {
    const Pass& pass = plan.passes[i];
    std::vector<std::string> ids, after;
    for (auto r : pass.runs) ids.push_back(study.runs[r].id);
    for (const auto& cache : pass.plan.options.caches) {
      if (array_of_cache.count(cache)) after.push_back(array_of_cache[cache]);
    }
    const std::string name = "pass " + std::to_string(i + 1) + " " + study.runs[pass.runs.front()].group;
    jobs.push_back(slurm.submit("pass", name, "pass=" + join(ids, ","), {0}, after));
  }
  return jobs;
}

// The slurm executor: collects what an earlier run left, submits, waits, collects. Returns the
// failure lines (empty: every task succeeded), or nullopt after --detach.
std::optional<std::vector<std::string>> run_on_slurm(const Study& study, const Selection& selected, StudyPlan& plan,
                                                     RunLedger& ledger, const RunStudyOptions& options) {
  SlurmExecutor slurm(study);
  std::vector<std::string> failures;
  const std::vector<SubmittedJob> earlier = slurm.load_pending();
  if (!earlier.empty()) {
    std::printf("slurm: collecting %zu job%s an earlier `embcache run` submitted\n", earlier.size(), earlier.size() == 1 ? "" : "s");
    const SlurmOutcome outcome = slurm.wait(earlier);
    failures = outcome.failures;
    for (auto& line : collect(slurm, outcome, ledger)) failures.push_back(line);
    slurm.save_pending({});
    for (const auto& line : failures) std::printf("slurm: %s\n", line.c_str());
    if (!failures.empty()) std::printf("slurm: %zu task(s) of the earlier submission failed; submitting what is missing\n", failures.size());
    failures.clear();
  }
  for (int round = 0; round < 2; ++round) {
    plan.update();
    const std::vector<SubmittedJob> jobs = submit_round(slurm, study, selected, plan, round == 0, options.force && round == 0);
    if (jobs.empty()) break;
    slurm.save_pending(jobs);
    if (options.detach) {
      std::printf("slurm: submitted; run `embcache run %s` later to collect the results (it waits for jobs still queued)\n",
                  study.path.c_str());
      return std::nullopt;
    }
    const SlurmOutcome outcome = slurm.wait(jobs);
    failures.insert(failures.end(), outcome.failures.begin(), outcome.failures.end());
    for (auto& line : collect(slurm, outcome, ledger)) failures.push_back(line);
    slurm.save_pending({});
    const bool precomputed = std::any_of(jobs.begin(), jobs.end(), [](const SubmittedJob& j) { return j.kind == "precompute"; });
    if (!failures.empty() || !precomputed) break;
    // The precomputes may have changed rows that runs finished before were trained on.
  }
  return failures;
}

// The results tables and the report, from the ledger.
void finish_study(const Study& study, const RunLedger& ledger, const Selection& selected) {
  // Precomputes alone (no probe entries, or --only a precompute) have no results to table.
  if (selected.groups.empty()) return;
  write_results(study, ledger);
  std::printf("\n%s", results_text(study, ledger, selected.groups).c_str());
  const std::string report = write_report(study.output_dir);
  std::printf("\nresults: %s/results.csv, %s/results.jsonl\nreport: %s\n", study.output_dir.c_str(),
              study.output_dir.c_str(), report.c_str());
  std::fflush(stdout);
}

}  // namespace

void run_study(const RunStudyOptions& options) {
  const Study study = load_study(options.config);
  if (!options.task.empty()) {  // inside a Slurm job: no lock, no ledger (the collecting run owns both)
    const WorkerTask task = parse_worker_task(options.task);
    if (task.kind == "precompute") return run_worker_precompute(study, task.precompute);
    const auto [job, index] = slurm_array_task();
    return run_worker_pass(study, task.run_ids, study.output_dir + "/slurm/results/" + job + "_" + std::to_string(index) + ".jsonl");
  }
  const bool slurm = study.executor.kind == Executor::Kind::kSlurm;
  if (options.detach && !slurm) throw UsageError(OptionName{"detach"}, "is for studies whose \"executor\" is slurm");
  const Selection selected = select_entries(study, options.only);
  // A dry run only reads.
  const std::unique_ptr<FileLock> lock = options.dry_run ? nullptr : lock_output_dir(study);
  RunLedger ledger(study.output_dir, study.version);
  StudyPlan plan(study, ledger, selected, options.force);
  plan.update();

  std::printf("%s: %zu precompute%s, %zu probe run%s (%zu finished, %zu to run in %zu train-probe pass%s) -> %s\n",
              study.path.c_str(), selected.precomputes.size(), selected.precomputes.size() == 1 ? "" : "s",
              plan.selected_runs, plan.selected_runs == 1 ? "" : "s", plan.finished, plan.pending(),
              plan.passes.size(), plan.passes.size() == 1 ? "" : "es", study.output_dir.c_str());
  if (plan.stale > 0) say_stale(plan.stale, "", std::string(plan.stale == 1 ? "its" : "their") + " cache no longer holds");
  if (options.dry_run) {
    print_dry_run(study, selected, plan);
    return;
  }

  if (slurm) {
    const auto failures = run_on_slurm(study, selected, plan, ledger, options);
    if (!failures) return;  // --detach
    if (failures->empty()) {
      finish_study(study, ledger, selected);
    } else {
      for (const auto& line : *failures) std::printf("slurm: %s\n", line.c_str());
      std::fflush(stdout);
      try {
        finish_study(study, ledger, selected);  // what did finish
      } catch (const InputError&) {  // nothing finished yet: no table to write
      }
      throw Error(ExitCode::kInput, std::to_string(failures->size()) + " Slurm task" + (failures->size() == 1 ? "" : "s") +
                                        " failed (first: " + failures->front() + "); rerun `embcache run " + study.path +
                                        "` to submit what is missing or failed");
    }
    return;
  }
  run_precomputes(study, selected);
  // The precomputes may have changed rows that finished runs were trained on.
  const std::size_t stale_before = plan.stale;
  plan.update();
  if (plan.stale > stale_before) say_stale(plan.stale - stale_before, "more ", "the precomputes just changed");
  preflight_passes(study, plan.passes);

  for (std::size_t i = 0; i < plan.passes.size(); ++i) {
    const Pass& pass = plan.passes[i];
    std::printf("== pass %zu/%zu: %s, %zu run%s (%s) ==\n", i + 1, plan.passes.size(),
                study.runs[pass.runs.front()].group.c_str(), pass.runs.size(), pass.runs.size() == 1 ? "" : "s",
                grid_text(pass.plan.grid).c_str());
    std::fflush(stdout);
    run_pass(study, pass, plan.content_of(pass.plan.options), ledger);
  }
  finish_study(study, ledger, selected);
}

}  // namespace embcache
