// The monotonic clock the stage timings and summaries are measured with.
#pragma once

#include <time.h>

#include <chrono>

namespace embcache {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU time the calling thread has used. Unlike wall time it leaves out the time the thread was
// preempted: a stage at SCHED_IDLE waits through whole encoder calls in the middle of its work.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Busy time of one stage: wall seconds (preemption included) and the thread's CPU seconds.
struct StageTime {
  double wall = 0, cpu = 0;
};

// Measures one piece of a stage's work, from construction (or restart()) to add_to().
class StageStopwatch {
 public:
  StageStopwatch() { restart(); }
  void restart() {
    wall_ = Clock::now();
    cpu_ = thread_cpu_seconds();
  }
  void add_to(StageTime& time) const {
    time.wall += seconds_since(wall_);
    time.cpu += thread_cpu_seconds() - cpu_;
  }

 private:
  Clock::time_point wall_;
  double cpu_ = 0;
};

}  // namespace embcache
