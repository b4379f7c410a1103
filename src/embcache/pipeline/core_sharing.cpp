#include "embcache/pipeline/core_sharing.hpp"

#include <pthread.h>
#include <sched.h>

namespace embcache {

StagePriority::StagePriority(const std::string& mode)
    : state_(mode == "normal" ? kNormal : mode == "idle" ? kIdle : kUndecided) {}

void StagePriority::follow(bool& normal_now) const {
  const int s = state_.load(std::memory_order_relaxed);
  const bool want_normal = s == kNormal;
  if (want_normal == normal_now) return;
  sched_param param{};
  // Leaving SCHED_IDLE may be refused without privileges (RLIMIT_NICE): then the stage stays idle.
  if (pthread_setschedparam(pthread_self(), want_normal ? SCHED_OTHER : SCHED_IDLE, &param) == 0 || !want_normal) {
    normal_now = want_normal;
  } else {
    normal_now = true;  // do not retry every item
  }
}

void StagePriority::observe(double encoder_busy_seconds, double elapsed_seconds) {
  if (state_.load(std::memory_order_relaxed) != kUndecided || elapsed_seconds < 0.2) return;
  int undecided = kUndecided;
  state_.compare_exchange_strong(undecided, encoder_busy_seconds < 0.5 * elapsed_seconds ? kNormal : kIdle);
}

std::string StagePriority::decision() const {
  const int s = state_.load();
  return s == kNormal ? "normal" : s == kIdle ? "idle" : "idle (undecided)";
}

int encoder_threads_for(double feature_bytes_per_second, int threads) {
  if (threads < 2) return threads;
  const double with_one_fewer = feature_bytes_per_second * double(threads - 1) / double(threads);
  return with_one_fewer >= kWriterBytesPerSecond ? threads - 1 : threads;
}

}  // namespace embcache
