// The Slurm executor of studies ("executor": {"type": "slurm", ...}, docs/scale-out.md): job
// scripts that run `embcache run CONFIG --task ...`, their submission with sbatch (job arrays,
// afterok dependencies), progress from squeue and from the exit status each task writes, and
// scancel. What a study submitted is kept in OUTPUT_DIR/slurm/jobs.json, so that a later
// `embcache run` (after --detach, or a crash of this one) collects it. Only the `embcache run`
// that collects writes the ledger; jobs write their rows to OUTPUT_DIR/slurm/results/.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "embcache/batch/study_config.hpp"

namespace embcache {

struct SubmittedJob {
  std::string id;                    // Slurm's job id of the array
  std::string kind;                  // "precompute" or "pass"
  std::string name;                  // for people: "precompute enc", "pass 1: linear"
  std::string task;                  // what the tasks run: `embcache run CONFIG --task TASK`
  std::vector<std::int64_t> tasks;   // array task ids (shards, or 0)
  std::string log;                   // the log path pattern (%A: job id, %a: task id)
  std::string log_of(std::int64_t task) const;
  nlohmann::json to_json() const;
  static SubmittedJob from_json(const nlohmann::json& j);
};

// How the tasks of some jobs ended.
struct SlurmOutcome {
  std::vector<std::pair<const SubmittedJob*, std::int64_t>> succeeded;
  std::vector<std::string> failures;  // one line each: job id, what it was, why, its log
};

class SlurmExecutor {
 public:
  // IoError when sbatch or squeue is not on PATH.
  explicit SlurmExecutor(const Study& study);

  // Submits `embcache run CONFIG --task TASK` as a job array over `tasks` (at most max_parallel
  // at once for precomputes), starting after every job of `after` succeeded. IoError with
  // Slurm's own message when sbatch refuses it.
  SubmittedJob submit(const std::string& kind, const std::string& name, const std::string& task,
                      const std::vector<std::int64_t>& tasks, const std::vector<std::string>& after);
  // Waits until every task of `jobs` has ended, printing a progress line whenever the counts
  // change. A task whose dependency can never be satisfied (its precompute failed) is
  // cancelled and counted as failed. On Ctrl-C cancels every job of `jobs` and throws Interrupted.
  SlurmOutcome wait(const std::vector<SubmittedJob>& jobs) const;
  void cancel(const std::vector<SubmittedJob>& jobs) const;

  // OUTPUT_DIR/slurm/jobs.json: the jobs a run submitted and has not collected yet.
  std::vector<SubmittedJob> load_pending() const;
  void save_pending(const std::vector<SubmittedJob>& jobs) const;
  // Where a pass task leaves its ledger rows.
  std::string results_file(const std::string& job, std::int64_t task) const;

 private:
  std::string script_for(const std::string& name, const std::string& task) const;
  std::string status_file(const std::string& job, std::int64_t task) const;

  const Study& study_;
  std::string dir_;  // OUTPUT_DIR/slurm
};

// The task a Slurm job runs, parsed from `--task`: "precompute=NAME" or "pass=ID,ID,...".
struct WorkerTask {
  std::string kind;
  std::string precompute;            // kind "precompute"
  std::vector<std::string> run_ids;  // kind "pass"
};
WorkerTask parse_worker_task(const std::string& text);
// SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID of this process (UsageError outside a Slurm task).
std::pair<std::string, std::int64_t> slurm_array_task();

}  // namespace embcache
