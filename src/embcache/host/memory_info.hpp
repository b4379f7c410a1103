// What memory this process may use: available RAM, free GPU memory, and its own peak RSS.
#pragma once

#include <cstdint>

namespace embcache {

std::int64_t available_host_bytes();          // MemAvailable from /proc/meminfo
// Free memory of CUDA device `index` through the CUDA runtime (loaded on demand); -1 when unknown.
std::int64_t free_gpu_bytes(int index);
std::int64_t peak_rss_bytes();                // this process, so far

}  // namespace embcache
