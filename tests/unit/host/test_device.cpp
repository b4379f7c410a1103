#include "doctest_torch.hpp"

#include <torch/cuda.h>

#include <string>

#include "embcache/core/error.hpp"
#include "embcache/host/device.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("host");

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("--device is checked before CUDA is looked for; cuda:N takes digits only") {
  CHECK(resolve_device("cpu") == c10::Device(c10::kCPU));
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:1x", "cuda:-1", "CUDA"}) {
    CAPTURE(bad);
    try {
      resolve_device(bad);
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK(contains(e.what(), "expected auto, cpu, cuda or cuda:N, got \"" + std::string(bad) + "\""));
    }
  }
  if (!torch::cuda::is_available()) {
    for (const char* text : {"cuda", "cuda:0", "cuda:3"}) {
      CAPTURE(text);
      try {
        resolve_device(text);
        FAIL("accepted");
      } catch (const UsageError& e) {
        CHECK(contains(e.what(), "CUDA is not available"));
      }
    }
  } else {
    CHECK(resolve_device("cuda:0") == c10::Device(c10::kCUDA, 0));
    CHECK_THROWS_AS(resolve_device("cuda:99"), UsageError);
  }
}

TEST_SUITE_END();
