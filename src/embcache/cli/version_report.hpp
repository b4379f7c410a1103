// `embcache --version`: this build and what it runs with, as users paste it into bug reports.
#pragma once

#include <string>

namespace embcache {

// "embcache 0.1.0", then LibTorch, HDF5 and GDAL (built with / running with) and the CUDA devices.
std::string version_report();

}  // namespace embcache
