#include "embcache/host/memory_info.hpp"

#include <dlfcn.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>

namespace embcache {

std::int64_t available_host_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  std::int64_t kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    long long v = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

std::int64_t free_gpu_bytes(int index) {
  // The CPU build of LibTorch has no CUDA headers to ask; the runtime library answers directly.
  using SetDevice = int (*)(int);
  using MemGetInfo = int (*)(std::size_t*, std::size_t*);
  for (const char* name : {"libcudart.so", "libcudart.so.12", "libcudart.so.11.0"}) {
    void* lib = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
    if (!lib) continue;
    auto set_device = reinterpret_cast<SetDevice>(dlsym(lib, "cudaSetDevice"));
    auto mem_get_info = reinterpret_cast<MemGetInfo>(dlsym(lib, "cudaMemGetInfo"));
    std::size_t free = 0, total = 0;
    const bool ok = set_device && mem_get_info && set_device(index) == 0 && mem_get_info(&free, &total) == 0;
    if (ok) return std::int64_t(free);
  }
  return -1;
}

std::int64_t peak_rss_bytes() {
  struct rusage usage;
  std::memset(&usage, 0, sizeof usage);
  getrusage(RUSAGE_SELF, &usage);
  return std::int64_t(usage.ru_maxrss) * 1024;
}

}  // namespace embcache
