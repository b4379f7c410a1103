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

// Wall time of one piece of a stage's work, from construction (or restart()) to add_to(); the
// CPU time is CpuLedger's.
class StageStopwatch {
 public:
  StageStopwatch() { restart(); }
  void restart() { wall_ = Clock::now(); }
  void add_to(StageTime& time) const { time.wall += seconds_since(wall_); }

 private:
  Clock::time_point wall_;
};

// Splits the calling thread's CPU time between the kinds of work it does (the `cpu` of each
// StageTime), from construction to destruction. The thread's CPU clock is a system call, so it
// is read only where the kind changes: read per window and per crop, it would be a good part of
// the prep stage's own CPU time. The
// little CPU a thread uses while it waits for work (it sleeps) goes to the kind it did last.
// Lives in the thread it measures, and not beyond the StageTimes it charges.
class CpuLedger {
 public:
  explicit CpuLedger(StageTime& first) : current_(&first), since_(thread_cpu_seconds()) {}
  ~CpuLedger() { charge_to(*current_); }
  CpuLedger(const CpuLedger&) = delete;
  CpuLedger& operator=(const CpuLedger&) = delete;

  // The CPU used since the last change goes to the kind before; from now on, to `next`.
  void charge_to(StageTime& next) {
    const double now = thread_cpu_seconds();
    current_->cpu += now - since_;
    since_ = now;
    current_ = &next;
  }

 private:
  StageTime* current_;
  double since_;
};

}  // namespace embcache
