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

TEST_SUITE_END();
