// NaN/Inf detection on stored bits, against torch's isfinite on the same values, for every
// storage dtype, at every position of a vector-sized block (the vectorised loop has a tail).
#include "doctest_torch.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "embcache/store/finite_check.hpp"
#include "embcache/store/storage_options.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("store");

TEST_CASE("non-finite detection agrees with torch for float32, float16 and bfloat16") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Finite edge cases: zeros, the largest and smallest normal values, subnormals.
  const std::vector<float> finite = {0.0f, -0.0f, 1.0f, -3.5f, 65504.0f, 1e-8f, 1e-40f, -1e-45f,
                                     std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest()};
  for (const auto& [dtype, type] : {std::pair{StorageDtype::kFloat32, at::kFloat}, std::pair{StorageDtype::kFloat16, at::kHalf},
                                    std::pair{StorageDtype::kBFloat16, at::kBFloat16}}) {
    INFO("dtype " << to_string(dtype));
    for (const float bad : {inf, -inf, nan, -nan}) {
      for (std::int64_t length : {1, 7, 64, 67}) {
        for (std::int64_t at = 0; at < length; at += std::max<std::int64_t>(1, length / 5)) {
          at::Tensor v = at::ones({length}).mul_(0.25f).to(type);
          CHECK(all_finite(v.data_ptr(), std::size_t(length), dtype));
          v[at] = bad;
          CHECK_FALSE(all_finite(v.data_ptr(), std::size_t(length), dtype));
        }
      }
    }
    // float's largest values round to Inf in both 16-bit types; the stored bits are what count.
    const at::Tensor stored = at::tensor(finite).to(type);
    const bool torch_finite = at::isfinite(stored).all().item<bool>();
    CHECK(all_finite(stored.data_ptr(), std::size_t(stored.numel()), dtype) == torch_finite);
    CHECK(torch_finite == (dtype == StorageDtype::kFloat32));
  }
}

TEST_SUITE_END();
