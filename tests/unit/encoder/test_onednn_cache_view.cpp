// oneDNN's view of the CPU caches, read from the oneDNN that LibTorch loaded, and the verdict on it
// that keeps precompute --optimize from running oneDNN's optimised kernels where they divide by zero.
#include "doctest_torch.hpp"

#include <link.h>

#include <string>

#include "embcache/encoder/onednn_cache_view.hpp"

using namespace embcache;

namespace {

// Whether a shared object whose file name contains `name` is loaded in this process.
bool library_loaded(const std::string& name) {
  struct Search {
    std::string name;
    bool found = false;
  } search{name};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        const std::string path = info->dlpi_name != nullptr ? info->dlpi_name : "";
        if (path.find(s->name) != std::string::npos) s->found = true;
        return 0;
      },
      &search);
  return search.found;
}

}  // namespace

TEST_CASE("oneDNN's cache view is read wherever LibTorch loaded oneDNN 3" * doctest::test_suite("encoder")) {
  const std::optional<OneDnnCaches> view = onednn_cache_view();
  INFO("libdnnl.so.3 loaded: " << library_loaded("libdnnl.so.3"));
  // Debian 13's LibTorch 2.6 links oneDNN 3, which exports the function; Debian 12's links oneDNN
  // 2.6, which does not.
  CHECK(view.has_value() == library_loaded("libdnnl.so.3"));
  if (view) {
    INFO("L1 " << view->l1 << " L2 " << view->l2 << " L3 " << view->l3);
    CHECK(view->l1 > 0);
    CHECK(view->l2 > 0);
  }
}

TEST_CASE("oneDNN's optimised kernels are refused only where its cache sizes are the empty cpuid leaf's" *
          doctest::test_suite("encoder")) {
  // Its guesses when cpuid says nothing, and a Zen 5 core's real sizes.
  CHECK(onednn_kernel_hazard(OneDnnCaches{32 * 1024, 512 * 1024, 1024 * 1024}).empty());
  CHECK(onednn_kernel_hazard(OneDnnCaches{48 * 1024, 1024 * 1024, 4 * 1024 * 1024}).empty());
  // What oneDNN 3.6 computed on a VM whose leaf 0x8000001D is all zeros: 1 byte at every level.
  const std::string hazard = onednn_kernel_hazard(OneDnnCaches{1, 1, 1});
  CHECK(hazard.find("1-byte L1") != std::string::npos);
  CHECK(hazard.find("cpuid") != std::string::npos);
  CHECK(hazard.find('\n') == std::string::npos);
  CHECK_FALSE(onednn_kernel_hazard(OneDnnCaches{48 * 1024, 0, 0}).empty());
}
