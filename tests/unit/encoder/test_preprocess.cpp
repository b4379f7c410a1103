#include "doctest_torch.hpp"
#include "embcache/core/error.hpp"
#include "embcache/dataset/cropper.hpp"
#include "embcache/encoder/preprocess.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("encoder");

TEST_CASE("preprocess: (raw * scale - mean) / std per channel, in float32") {
  const at::Tensor raw = at::arange(2 * 2 * 2, at::kShort).view({2, 2, 2});
  Preprocess p;
  p.scale = 0.5;
  p.mean = {1.0, 2.0};
  p.std = {2.0, 4.0};
  const at::Tensor out = p.apply(raw);
  REQUIRE((out.scalar_type() == at::kFloat));
  const at::Tensor x = raw.to(at::kFloat) * 0.5;
  const at::Tensor expected = at::stack({(x[0] - 1.0f) / 2.0f, (x[1] - 2.0f) / 4.0f});
  REQUIRE(at::equal(out, expected));
  REQUIRE_THROWS_AS(p.validate(3), UsageError);
  Preprocess zero;
  zero.std = {0.0};
  REQUIRE_THROWS_AS(zero.validate(1), UsageError);
}

TEST_CASE("preprocess: the one-pass loop gives ATen's bits for every dtype, time axis and stride") {
  Preprocess p;
  p.mean = {0.485, 0.456, 0.406};
  p.std = {0.229, 0.224, 0.225};
  const at::Tensor noise = at::rand({3, 3, 37, 41}, at::kDouble);
  for (const double scale : {1.0, 0.00392157, 1e-4}) {
    p.scale = scale;
    for (const auto dtype : {at::kByte, at::kShort, at::kInt, at::kFloat, at::kDouble}) {
      const double range = dtype == at::kByte ? 255.0 : dtype == at::kShort ? 30000.0 : 70000.0;
      const at::Tensor timed = (noise * range - (dtype == at::kByte ? 0.0 : range / 3)).to(dtype);  // [T, C, h, w]
      const at::Tensor views[] = {timed, timed[1], timed[2].narrow(1, 3, 20).narrow(2, 5, 30)};
      for (const at::Tensor& raw : views) {
        CAPTURE(scale);
        CAPTURE(dtype);
        CAPTURE(raw.sizes());
        const at::Tensor fast = p.apply(raw), reference = p.apply_with_aten(raw);
        REQUIRE((fast.scalar_type() == at::kFloat));
        REQUIRE(fast.sizes() == raw.sizes());
        // Bitwise: the same float32 operations in the same order.
        REQUIRE(at::equal(fast.view(at::kInt), reference.contiguous().view(at::kInt)));
      }
    }
  }
  p.mean = {0.5};  // one value for every channel
  p.std = {0.25};
  const at::Tensor raw = at::randint(0, 256, {3, 8, 8}, at::kByte);
  REQUIRE(at::equal(p.apply(raw).view(at::kInt), p.apply_with_aten(raw).view(at::kInt)));
}

TEST_SUITE_END();
