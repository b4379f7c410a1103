#include "doctest_torch.hpp"

#include "embcache/core/error.hpp"
#include "embcache/dataset/crop_grid.hpp"
#include "embcache/dataset/rslearn_dataset.hpp"

TEST_SUITE_BEGIN("dataset");

using embcache::Bounds;
using embcache::CropGridSpec;
using embcache::crop_grid;

namespace {

CropGridSpec square(std::int64_t size, std::int64_t overlap) {
  CropGridSpec spec;
  spec.width = size;
  spec.height = size;
  spec.overlap = overlap;
  return spec;
}

std::vector<std::int64_t> xs(const std::vector<Bounds>& crops) {
  std::vector<std::int64_t> out;
  for (const auto& c : crops) {
    if (out.empty() || out.back() != c.x1) out.push_back(c.x1);
  }
  return out;
}

}  // namespace

TEST_CASE("crop grid follows rslearn's 1-D examples: stride, snapped last crop") {
  // rslearn's documented case: bounds [0, 15], crop 8, overlap 2 -> crops at 0, 6 and 7.
  const auto a = crop_grid({0, 0, 15, 8}, square(8, 2));
  REQUIRE(xs(a) == std::vector<std::int64_t>{0, 6, 7});
  // And [0, 14] has only the first and the snapped last crop.
  const auto b = crop_grid({0, 0, 14, 8}, square(8, 2));
  REQUIRE(xs(b) == std::vector<std::int64_t>{0, 6});
  // Exact multiple without overlap: no duplicate last crop.
  const auto c = crop_grid({0, 0, 32, 16}, square(16, 0));
  REQUIRE(xs(c) == std::vector<std::int64_t>{0, 16});
}

TEST_CASE("crop grid is x-outer, y-inner, in absolute coordinates") {
  const auto crops = crop_grid({100, 200, 124, 216}, square(8, 0));
  REQUIRE(crops.size() == 6);
  const std::vector<Bounds> expected = {
      {100, 200, 108, 208}, {100, 208, 108, 216}, {108, 200, 116, 208},
      {108, 208, 116, 216}, {116, 200, 124, 208}, {116, 208, 124, 216}};
  REQUIRE(crops == expected);
}

TEST_CASE("a window smaller than the crop gets one crop at its origin, extending past the edge") {
  const auto crops = crop_grid({5, 7, 15, 10}, square(16, 4));
  REQUIRE(crops.size() == 1);
  REQUIRE(crops[0] == Bounds{5, 7, 21, 23});
}

TEST_CASE("rectangular crops and no crop size") {
  CropGridSpec spec;
  spec.width = 10;
  spec.height = 4;
  const auto crops = crop_grid({0, 0, 20, 8}, spec);
  REQUIRE(crops.size() == 4);
  REQUIRE(crops.back() == Bounds{10, 4, 20, 8});
  const auto whole = crop_grid({3, 4, 50, 60}, CropGridSpec{});
  REQUIRE(whole == std::vector<Bounds>{{3, 4, 50, 60}});
}

TEST_CASE("every pixel is covered and every crop lies inside a large window") {
  const Bounds window{0, 0, 97, 61};
  const auto crops = crop_grid(window, square(16, 5));
  std::vector<int> covered(97 * 61, 0);
  for (const auto& c : crops) {
    REQUIRE(c.x1 >= 0);
    REQUIRE(c.y1 >= 0);
    REQUIRE(c.x2 <= 97);
    REQUIRE(c.y2 <= 61);
    for (auto y = c.y1; y < c.y2; ++y)
      for (auto x = c.x1; x < c.x2; ++x) covered[std::size_t(y * 97 + x)] = 1;
  }
  REQUIRE(std::count(covered.begin(), covered.end(), 0) == 0);
}

TEST_CASE("overlap must be smaller than the crop") {
  REQUIRE_THROWS_AS(square(8, 8).validate(), embcache::UsageError);
  REQUIRE_THROWS_AS(square(8, -1).validate(), embcache::UsageError);
  CropGridSpec no_size;
  no_size.overlap = 2;
  REQUIRE_THROWS_AS(no_size.validate(), embcache::UsageError);
  REQUIRE_NOTHROW(square(8, 7).validate());
}

TEST_CASE("rslearn band-set directory names follow rslearn's rule") {
  CHECK(embcache::rslearn_bandset_dirname({"B04", "B03", "B02"}) == "B04_B03_B02");
  // A band with '_': SHA-256 of Python's json.dumps(bands), quotes escaped.
  CHECK(embcache::rslearn_bandset_dirname({"B_08", "x\"y"}) ==
        "f6f11110116bd18bc2bb86e6c2a4a93cb4f11d81d896d0c2144864954d5fbf89");
  // Joined names longer than 64 characters: SHA-256 of the joined name.
  CHECK(embcache::rslearn_bandset_dirname({"B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09",
                                           "B10", "B11", "B12", "B13", "B14", "B15", "B16"}) ==
        "819f036991cefca8d9a79e00d2a52d4fa6d704e0abdd7c333ea7db07205b1853");
}

TEST_SUITE_END();
