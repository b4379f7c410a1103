#include "embcache/encoder/onednn_cache_view.hpp"

#include <dlfcn.h>

namespace embcache {

std::optional<OneDnnCaches> onednn_cache_view() {
  using PerCoreCacheSize = unsigned (*)(int);
  // dnnl::impl::cpu::platform::get_per_core_cache_size(int), looked up in the libraries already
  // loaded (LibTorch links oneDNN), so nothing is loaded here and no oneDNN header is needed.
  auto size = reinterpret_cast<PerCoreCacheSize>(
      dlsym(RTLD_DEFAULT, "_ZN4dnnl4impl3cpu8platform23get_per_core_cache_sizeEi"));
  if (size == nullptr) return std::nullopt;
  return OneDnnCaches{size(1), size(2), size(3)};
}

std::string onednn_kernel_hazard(const OneDnnCaches& view) {
  // No CPU has a level-1 or level-2 data cache under 1 KiB; below that the sizes are the cpuid
  // leaf's empty fields, not a measurement.
  constexpr unsigned kSmallest = 1024;
  if (view.l1 >= kSmallest && view.l2 >= kSmallest) return "";
  return "oneDNN sees " + std::to_string(view.l1) + "-byte L1 and " + std::to_string(view.l2) +
         "-byte L2 caches per core on this CPU (its cpuid cache leaves are empty, as in some VMs), and its "
         "binary kernel, which runs the optimised encoder's adds, divides by them";
}

}  // namespace embcache
