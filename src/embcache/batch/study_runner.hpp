// `embcache run`: plans a study (which runs are finished, how the rest fuse into multi-head
// passes), runs precomputes then probe passes, keeps the ledger, writes the results tables.
#pragma once

#include <string>
#include <vector>

namespace embcache {

struct RunStudyOptions {
  std::string config;
  bool dry_run = false;
  bool force = false;              // rerun finished runs
  std::vector<std::string> only;   // entry names (precompute or probe); empty = all
  bool detach = false;             // slurm executor: submit, record the jobs and return
  std::string task;                // what a Slurm job runs: "precompute=NAME" or "pass=ID,..." ("" = the study)
};

void run_study(const RunStudyOptions& options);

}  // namespace embcache
