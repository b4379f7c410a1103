#include "embcache/host/openmp_runtime.hpp"

#include <link.h>

#include <algorithm>
#include <filesystem>

namespace embcache {
namespace {

bool is_openmp_runtime(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  for (const char* prefix : {"libgomp", "libiomp5", "libomp."}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return name.rfind("libomp-", 0) == 0;
}

int collect(dl_phdr_info* info, std::size_t, void* data) {
  auto& found = *static_cast<std::vector<std::string>*>(data);
  const std::string path = info->dlpi_name == nullptr ? "" : info->dlpi_name;
  if (!path.empty() && is_openmp_runtime(path)) {
    std::error_code ec;
    const std::string real = std::filesystem::weakly_canonical(path, ec).string();
    const std::string key = ec ? path : real;
    if (std::find(found.begin(), found.end(), key) == found.end()) found.push_back(key);
  }
  return 0;
}

}  // namespace

std::vector<std::string> loaded_openmp_runtimes() {
  std::vector<std::string> found;
  dl_iterate_phdr(collect, &found);
  return found;
}

}  // namespace embcache
