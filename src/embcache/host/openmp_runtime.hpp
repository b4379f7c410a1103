// Which OpenMP runtimes this process has loaded. LibTorch's parallel loops run on one runtime and
// embcache's own OpenMP team (pipeline/core_sharing) on the one it was linked with; a PyTorch
// wheel brings its own libgomp, and the OpenMP tuning of docs/precompute.md reaches LibTorch's
// workers only when the two are the same library (docs/install.md).
#pragma once

#include <string>
#include <vector>

namespace embcache {

// Paths of the loaded shared objects that are OpenMP runtimes (GCC's libgomp, LLVM's libomp,
// Intel's libiomp5), in load order; each library once.
std::vector<std::string> loaded_openmp_runtimes();

}  // namespace embcache
