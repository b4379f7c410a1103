#include "embcache/core/cpu_info.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace embcache {

int usable_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) return std::max(1, CPU_COUNT(&allowed));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace embcache
