// Per-thread scheduler times of this process, from the kernel's /proc/self/task/*/schedstat:
// how long each thread ran and how long it was runnable without a core. bench_precompute samples
// them after every encoder call, so a slow call can be told apart: the encoder's threads waited
// for a core (something took it), or they ran the whole call and the work itself went slower.
// The encoder's team is every thread that precompute did not name "embcache ..." (the calling
// thread and its OpenMP workers); the stages are the named ones.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace bench {

struct ThreadTimes {
  double team_run = 0, team_wait = 0;  // seconds, summed over the encoder's team
  double stage_run = 0;                // seconds, summed over the named stage threads

  static ThreadTimes now() {
    ThreadTimes t;
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
      std::ifstream comm_file(task.path() / "comm"), sched(task.path() / "schedstat");
      std::string comm;
      long long run_ns = 0, wait_ns = 0;
      if (!std::getline(comm_file, comm) || !(sched >> run_ns >> wait_ns)) continue;  // thread gone
      if (comm.rfind("embcache ", 0) == 0) {
        t.stage_run += double(run_ns) * 1e-9;
      } else {
        t.team_run += double(run_ns) * 1e-9;
        t.team_wait += double(wait_ns) * 1e-9;
      }
    }
    return t;
  }
  ThreadTimes operator-(const ThreadTimes& o) const {
    return {team_run - o.team_run, team_wait - o.team_wait, stage_run - o.stage_run};
  }
};

}  // namespace bench
