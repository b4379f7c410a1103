#include "embcache/cli/version_report.hpp"

#include "embcache/host/device.hpp"
#include "embcache/host/openmp_runtime.hpp"
#include "embcache/dataset/gdal_raster.hpp"
#include "embcache/encoder/encoder.hpp"
#include "embcache/h5/h5.hpp"

namespace embcache {
namespace {

std::string built_and_running(const std::string& name, const std::string& built, const std::string& running) {
  return name + " " + running + (built == running ? " (built with the same)" : " (built with " + built + ")") + "\n";
}

}  // namespace

std::string version_report() {
  std::string report = std::string("embcache ") + EMBCACHE_VERSION + "\n";
  report += built_and_running("LibTorch", torch_version_built(), torch_version_running());
  report += built_and_running("HDF5", h5::version_built(), h5::version_running());
  report += built_and_running("GDAL", gdal_version_built(), gdal_version_running());
  const std::vector<std::string> openmp = loaded_openmp_runtimes();
  std::string runtimes;
  for (const auto& path : openmp) runtimes += (runtimes.empty() ? "" : ", ") + path;
  if (openmp.size() > 1) {
    report += "OpenMP runtimes: " + runtimes +
              " (more than one: precompute's OpenMP tuning reaches LibTorch's workers only on the same runtime; "
              "see docs/install.md)\n";
  } else {
    report += "OpenMP runtime: " + (runtimes.empty() ? std::string("none loaded") : runtimes) + "\n";
  }
  const std::string cuda = cuda_runtime_version();
  const int devices = cuda_device_count();
  if (cuda.empty()) {
    report += "CUDA: none (this LibTorch is a CPU build)";
  } else if (devices == 0) {
    report += "CUDA: LibTorch built with CUDA " + cuda + "; no GPU visible on this machine";
  } else {
    report += "CUDA: LibTorch built with CUDA " + cuda + "; " + std::to_string(devices) +
              (devices == 1 ? " device:" : " devices:");
    for (int i = 0; i < devices; ++i) report += " cuda:" + std::to_string(i);
  }
  return report;
}

}  // namespace embcache
