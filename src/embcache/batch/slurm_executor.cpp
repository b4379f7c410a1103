#include "embcache/batch/slurm_executor.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/core/stop_request.hpp"
#include "embcache/core/subprocess.hpp"

namespace fs = std::filesystem;

namespace embcache {
namespace {

// What a Slurm command said, for a message: its first line with text.
std::string said(const std::string& text) {
  const std::string line = first_line(text);
  return line.empty() ? "(no message)" : line;
}

// "a b" -> 'a b', safe inside a bash script.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string this_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("embcache") : self.string();
}

// "0-3" or "1,4,7", then "%K".
std::string array_spec(const std::vector<std::int64_t>& tasks, std::int64_t max_parallel) {
  std::string spec;
  bool contiguous = true;
  for (std::size_t i = 1; i < tasks.size(); ++i) contiguous = contiguous && tasks[i] == tasks[i - 1] + 1;
  if (contiguous && tasks.size() > 1) {
    spec = std::to_string(tasks.front()) + "-" + std::to_string(tasks.back());
  } else {
    for (auto t : tasks) spec += (spec.empty() ? "" : ",") + std::to_string(t);
  }
  if (max_parallel > 0) spec += "%" + std::to_string(max_parallel);
  return spec;
}

std::string safe_name(const std::string& name) {
  std::string out;
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out;
}

struct QueueState {
  std::string state;   // PENDING, RUNNING, ...
  std::string reason;
};

// squeue's view of this user's jobs: "JOB_TASK" -> state.
std::map<std::string, QueueState> queue_states() {
  const CommandResult r = run_command({"squeue", "-h", "-r", "--me", "-o", "%i|%T|%r"});
  if (r.exit_code != 0) throw IoError("executor slurm: squeue failed: " + said(r.output));
  std::map<std::string, QueueState> states;
  std::stringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    const auto a = line.find('|'), b = line.rfind('|');
    if (a == std::string::npos || a == b) continue;
    states[line.substr(0, a)] = {line.substr(a + 1, b - a - 1), line.substr(b + 1)};
  }
  return states;
}

}  // namespace

std::string SubmittedJob::log_of(std::int64_t task) const {
  std::string path = log;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"%A", id}, {"%a", std::to_string(task)}}) {
    for (auto at = path.find(from); at != std::string::npos; at = path.find(from)) path.replace(at, 2, to);
  }
  return path;
}

nlohmann::json SubmittedJob::to_json() const {
  return {{"id", id}, {"kind", kind}, {"name", name}, {"task", task}, {"tasks", tasks}, {"log", log}};
}

SubmittedJob SubmittedJob::from_json(const nlohmann::json& j) {
  return {j.at("id"), j.at("kind"), j.at("name"), j.at("task"), j.at("tasks").get<std::vector<std::int64_t>>(), j.at("log")};
}

SlurmExecutor::SlurmExecutor(const Study& study) : study_(study), dir_(study.output_dir + "/slurm") {
  for (const char* tool : {"sbatch", "squeue", "scancel"}) {
    if (!on_path(tool)) {
      throw IoError(study.path + ": executor slurm: " + tool + " not found on PATH; run `embcache run` on a node of "
                    "the cluster (where Slurm's commands are), or use \"executor\": \"local\"");
    }
  }
  for (const char* sub : {"", "/logs", "/status", "/results", "/scripts"}) {
    std::error_code ec;
    fs::create_directories(dir_ + sub, ec);
    if (ec) throw IoError(dir_ + sub + ": cannot create (" + ec.message() + ")");
  }
}

std::string SlurmExecutor::status_file(const std::string& job, std::int64_t task) const {
  return dir_ + "/status/" + job + "_" + std::to_string(task);
}

std::string SlurmExecutor::results_file(const std::string& job, std::int64_t task) const {
  return dir_ + "/results/" + job + "_" + std::to_string(task) + ".jsonl";
}

std::string SlurmExecutor::script_for(const std::string& name, const std::string& task) const {
  const SlurmSettings& s = study_.executor.slurm;
  const std::string path = dir_ + "/scripts/" + safe_name(name) + ".sbatch";
  std::ostringstream script;
  script << "#!/bin/bash\n"
         << "# Written by `embcache run " << study_.path << "`: " << name << ".\n"
         << "#SBATCH --job-name=" << safe_name("embcache-" + fs::path(study_.path).stem().string() + "-" + name) << "\n"
         << "#SBATCH --output=" << dir_ << "/logs/" << safe_name(name) << "-%A_%a.out\n";
  if (!s.partition.empty()) script << "#SBATCH --partition=" << s.partition << "\n";
  if (!s.time.empty()) script << "#SBATCH --time=" << s.time << "\n";
  if (s.cpus_per_task > 0) script << "#SBATCH --cpus-per-task=" << s.cpus_per_task << "\n";
  if (s.gpus_per_task > 0) script << "#SBATCH --gpus-per-task=" << s.gpus_per_task << "\n";
  if (!s.mem.empty()) script << "#SBATCH --mem=" << s.mem << "\n";
  // The exit status, renamed into place: a task killed before it ends leaves none.
  script << "status=" << quoted(dir_ + "/status") << "/${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\n"
         << quoted(this_executable()) << " run " << quoted(study_.path) << " --task " << quoted(task) << "\n"
         << "rc=$?\n"
         << "echo $rc >\"$status.tmp\" && mv \"$status.tmp\" \"$status\"\n"
         << "exit $rc\n";
  write_text_atomically(path, script.str(), "the job script of " + name);
  return path;
}

SubmittedJob SlurmExecutor::submit(const std::string& kind, const std::string& name, const std::string& task,
                                   const std::vector<std::int64_t>& tasks, const std::vector<std::string>& after) {
  const SlurmSettings& s = study_.executor.slurm;
  std::vector<std::string> argv{"sbatch", "--parsable",
                                "--array=" + array_spec(tasks, kind == "precompute" ? s.max_parallel : 0)};
  if (!after.empty()) {
    std::string dependency = "--dependency=afterok";
    for (const auto& id : after) dependency += ":" + id;
    argv.push_back(dependency);
  }
  argv.insert(argv.end(), s.sbatch_args.begin(), s.sbatch_args.end());
  argv.push_back(script_for(name, task));
  const CommandResult r = run_command(argv);
  const std::string id = said(r.output).substr(0, said(r.output).find(';'));
  if (r.exit_code != 0 || id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    throw IoError(study_.path + ": executor slurm: sbatch refused " + name + ": " + said(r.output));
  }
  SubmittedJob job{id, kind, name, task, tasks, dir_ + "/logs/" + safe_name(name) + "-%A_%a.out"};
  std::printf("slurm: submitted %s as job %s (%zu task%s)\n", name.c_str(), id.c_str(), tasks.size(),
              tasks.size() == 1 ? "" : "s");
  std::fflush(stdout);
  return job;
}

void SlurmExecutor::cancel(const std::vector<SubmittedJob>& jobs) const {
  if (jobs.empty()) return;
  std::vector<std::string> argv{"scancel"};
  for (const auto& job : jobs) argv.push_back(job.id);
  run_command(argv);
}

SlurmOutcome SlurmExecutor::wait(const std::vector<SubmittedJob>& jobs) const {
  SlurmOutcome outcome;
  std::string last_line;
  std::set<std::string> cancelled;  // jobs we cancelled because a job they wait for failed
  for (;;) {
    if (stop_requested()) {
      cancel(jobs);
      throw Interrupted("interrupted: the Slurm jobs this run submitted were cancelled (scancel); rerun the same "
                        "command to submit what is left");
    }
    const auto queue = queue_states();
    std::int64_t pending = 0, running = 0, done = 0, failed = 0;
    outcome = {};
    std::vector<std::string> never;
    for (const auto& job : jobs) {
      for (const auto task : job.tasks) {
        const std::string key = job.id + "_" + std::to_string(task);
        // A task of an array not yet split off is listed as JOB_[...]: count it as pending.
        auto it = queue.find(key);
        if (it == queue.end()) {
          for (const auto& [k, v] : queue) {
            if (k.rfind(job.id + "_[", 0) == 0) it = queue.find(k);
          }
        }
        if (it != queue.end()) {
          if (it->second.reason == "DependencyNeverSatisfied") never.push_back(job.id);
          (it->second.state == "PENDING" ? pending : running) += 1;
          continue;
        }
        std::ifstream status(status_file(job.id, task));
        int rc = -1;
        if (status >> rc && rc == 0) {
          ++done;
          outcome.succeeded.emplace_back(&job, task);
          continue;
        }
        ++failed;
        const std::string subject = job.name + (job.kind == "precompute" && job.tasks.size() > 1
                                                    ? " shard " + std::to_string(task) : std::string());
        const std::string why = rc >= 0 ? "failed with exit status " + std::to_string(rc)
                                : cancelled.count(job.id) ? std::string("was cancelled: a job it waits for failed")
                                                          : std::string("ended without an exit status (cancelled, killed, out of time or memory)");
        outcome.failures.push_back("job " + key + " (" + subject + ") " + why + "; log: " + job.log_of(task));
      }
    }
    if (!never.empty()) {
      cancelled.insert(never.begin(), never.end());
      std::vector<std::string> argv{"scancel"};
      argv.insert(argv.end(), never.begin(), never.end());
      run_command(argv);  // their precompute failed: they would wait forever
    }
    const std::string line = "slurm: " + std::to_string(pending) + " pending, " + std::to_string(running) + " running, " +
                             std::to_string(done) + " done, " + std::to_string(failed) + " failed";
    if (line != last_line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      last_line = line;
    }
    if (pending + running == 0) return outcome;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

std::vector<SubmittedJob> SlurmExecutor::load_pending() const {
  std::ifstream in(dir_ + "/jobs.json");
  if (!in) return {};
  std::vector<SubmittedJob> jobs;
  try {
    for (const auto& j : nlohmann::json::parse(in)) jobs.push_back(SubmittedJob::from_json(j));
  } catch (const std::exception& e) {
    throw InputError(dir_ + "/jobs.json: unreadable (" + std::string(e.what()) + "); remove it to submit afresh");
  }
  return jobs;
}

void SlurmExecutor::save_pending(const std::vector<SubmittedJob>& jobs) const {
  if (jobs.empty()) {
    std::error_code ec;
    fs::remove(dir_ + "/jobs.json", ec);
    return;
  }
  nlohmann::json all = nlohmann::json::array();
  for (const auto& job : jobs) all.push_back(job.to_json());
  write_text_atomically(dir_ + "/jobs.json", all.dump(2) + "\n", "the submitted Slurm jobs");
}

WorkerTask parse_worker_task(const std::string& text) {
  WorkerTask task;
  const auto eq = text.find('=');
  task.kind = text.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : text.substr(eq + 1);
  if (task.kind == "precompute" && !value.empty()) {
    task.precompute = value;
    return task;
  }
  if (task.kind == "pass" && !value.empty()) {
    std::stringstream ids(value);
    std::string id;
    while (std::getline(ids, id, ',')) task.run_ids.push_back(id);
    return task;
  }
  throw UsageError(OptionName{"task"}, "expected precompute=NAME or pass=RUN_ID,..., got \"" + text +
                   "\" (the Slurm executor's jobs pass it; you need not)");
}

std::pair<std::string, std::int64_t> slurm_array_task() {
  const char* job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
  if (!job || !task) {
    throw UsageError(OptionName{"task"}, "runs inside a task of a Slurm job array (SLURM_ARRAY_JOB_ID and "
                     "SLURM_ARRAY_TASK_ID are not set)");
  }
  return {job, std::atoll(task)};
}

}  // namespace embcache
