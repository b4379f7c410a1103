#include "doctest_torch.hpp"

#include "embcache/core/error.hpp"
#include "embcache/dataset/cropper.hpp"
#include "embcache/encoder/preprocess.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("dataset");

TEST_CASE("crop inside the window is an exact slice, bands in the given order") {
  const at::Tensor pixels = at::arange(3 * 6 * 8, at::kInt).view({3, 6, 8});
  CropperOptions options;
  options.bands = {2, 0};
  const CropPixels crop = cut_crop(pixels, at::Tensor(), {0, 0, 8, 6}, {2, 1, 6, 5}, options);
  const at::Tensor expected = at::stack({pixels[2], pixels[0]}).slice(1, 1, 5).slice(2, 2, 6);
  REQUIRE(crop.pixels.is_contiguous());
  REQUIRE(at::equal(crop.pixels, expected));
  REQUIRE_FALSE(crop.mask.defined());
}

TEST_CASE("crop past the edge is padded with the pad value, masks with the ignore index") {
  const at::Tensor pixels = at::ones({2, 3, 4}, at::kByte) * 7;
  const at::Tensor mask = at::full({3, 4}, 1, at::kInt);
  CropperOptions options;
  options.pad_value = 9;
  options.mask_pad_value = 255;
  // Window at absolute (10, 20); crop 6x5 from its origin.
  const CropPixels crop = cut_crop(pixels, mask, {10, 20, 14, 23}, {10, 20, 16, 25}, options);
  at::Tensor expected = at::full({2, 5, 6}, 9, at::kByte);
  expected.slice(1, 0, 3).slice(2, 0, 4).fill_(7);
  at::Tensor expected_mask = at::full({5, 6}, 255, at::kInt);
  expected_mask.slice(0, 0, 3).slice(1, 0, 4).fill_(1);
  REQUIRE(at::equal(crop.pixels, expected));
  REQUIRE(at::equal(crop.mask, expected_mask));
}

TEST_CASE("a pad value the pixels' dtype cannot hold pads in float32, keeping the pixels' values") {
  const at::Tensor pixels = at::full({1, 2, 2}, 200, at::kByte);
  CropperOptions options;
  for (double pad : {-1.0, 0.5, 256.0}) {
    CAPTURE(pad);
    options.pad_value = pad;
    const CropPixels crop = cut_crop(pixels, at::Tensor(), {0, 0, 2, 2}, {0, 0, 3, 2}, options);
    REQUIRE((crop.pixels.scalar_type() == at::kFloat));
    at::Tensor expected = at::full({1, 2, 3}, pad, at::kFloat);
    expected.slice(2, 0, 2).fill_(200);
    REQUIRE(at::equal(crop.pixels, expected));
  }
  options.pad_value = 255;  // fits: the crop keeps the dataset's dtype
  REQUIRE((cut_crop(pixels, at::Tensor(), {0, 0, 2, 2}, {0, 0, 3, 2}, options).pixels.scalar_type() == at::kByte));
}

TEST_CASE("preprocess: (raw * scale - mean) / std per channel, in float32" * doctest::test_suite("encoder")) {
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

TEST_CASE("preprocess: the one-pass loop gives ATen's bits for every dtype, time axis and stride" * doctest::test_suite("encoder")) {
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
