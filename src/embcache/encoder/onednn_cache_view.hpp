// The CPU caches as oneDNN sees them, and whether its binary kernel can run with that view.
#pragma once

#include <optional>
#include <string>

namespace embcache {

// Per-core data cache sizes in bytes, levels 1-3, as oneDNN's blocking heuristics use them.
struct OneDnnCaches {
  unsigned l1 = 0;
  unsigned l2 = 0;
  unsigned l3 = 0;
};

// oneDNN's view in this process: read from dnnl::impl::cpu::platform::get_per_core_cache_size,
// which oneDNN 3.x (Debian 13's LibTorch 2.6) exports. nullopt where the loaded oneDNN does not
// export it (Debian 12's oneDNN 2.6) or none is loaded.
std::optional<OneDnnCaches> onednn_cache_view();

// Why oneDNN's binary kernel cannot run with this view, or "" when it can. Some VMs advertise
// AMD's cache-topology cpuid leaf (0x8000001D) and return zeros from it; oneDNN 3.6 then computes
// 1-byte caches at every level, and its binary kernel (the residual adds that
// optimize_for_inference hands to oneDNN, as in MobileNetV2 and ResNet-50) divides by
// L1 / 8 = 0: SIGFPE on the first batch. Its convolution, pooling and activation kernels run
// with such a view.
std::string onednn_kernel_hazard(const OneDnnCaches& view);

}  // namespace embcache
