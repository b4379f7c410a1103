// The monotonic clock the stage timings and summaries are measured with.
#pragma once

#include <chrono>

namespace embcache {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace embcache
