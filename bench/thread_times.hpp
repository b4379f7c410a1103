// Per-thread scheduler times of this process, from the kernel's /proc/self/task/*/schedstat:
// how long each thread ran and how long it was runnable without a core. bench_precompute samples
// them after every encoder call, so a slow call can be told apart: the encoder's threads waited
// for a core (something took it), or they ran the whole call and the work itself went slower.
// The encoder's team is every thread that embcache did not name "embcache ..." (the calling
// thread and its OpenMP workers); the stages are the named ones.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace bench {

struct ThreadTimes {
  struct Thread {
    bool stage = false;
    double run = 0, wait = 0;  // seconds
  };
  std::map<std::string, Thread> threads;  // by thread id

  static ThreadTimes now() {
    ThreadTimes t;
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
      std::ifstream comm_file(task.path() / "comm"), sched(task.path() / "schedstat");
      std::string comm;
      long long run_ns = 0, wait_ns = 0;
      if (!std::getline(comm_file, comm) || !(sched >> run_ns >> wait_ns)) continue;  // thread gone
      t.threads[task.path().filename().string()] = {comm.rfind("embcache ", 0) == 0, double(run_ns) * 1e-9,
                                                    double(wait_ns) * 1e-9};
    }
    return t;
  }

  // Seconds since `before`, summed over the threads alive at both samples.
  struct Delta {
    double team_run = 0, team_wait = 0, stage_run = 0;
  };
  Delta since(const ThreadTimes& before) const {
    Delta d;
    for (const auto& [id, now] : threads) {
      const auto then = before.threads.find(id);
      if (then == before.threads.end()) continue;
      if (now.stage) {
        d.stage_run += now.run - then->second.run;
      } else {
        d.team_run += now.run - then->second.run;
        d.team_wait += now.wait - then->second.wait;
      }
    }
    return d;
  }
};

}  // namespace bench
