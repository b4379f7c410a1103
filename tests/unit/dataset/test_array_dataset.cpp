#include "doctest_torch.hpp"

#include <vector>

#include "embcache/dataset/array_dataset.hpp"
#include "test_support.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("dataset");

namespace {

// Reads window `i` of `source` and REQUIREs that it is row `i` of the dataset `spec` wrote.
void require_row(WindowSource& source, const testing::ArrayDatasetSpec& spec, std::int64_t i) {
  CAPTURE(i);
  const WindowData w = source.read(std::size_t(i));
  REQUIRE(at::equal(w.pixels, spec.images[i]));
  if (spec.masks.defined()) REQUIRE(at::equal(w.mask, spec.masks[i]));
  if (spec.labels.defined() && spec.labels.is_floating_point()) REQUIRE(at::equal(w.label_value, spec.labels[i]));
  if (spec.labels.defined() && !spec.labels.is_floating_point()) REQUIRE(w.label_class == spec.labels[i].item<std::int64_t>());
}

}  // namespace

// Windows of 2 MiB (1 MiB of int32 pixels, 1 MiB of mask) make blocks of two rows, so reads in
// order cross block edges, and reads out of order mix single rows with blocks.
TEST_CASE("array dataset: windows read in blocks are the rows on disk, in any order") {
  testing::TempDir dir;
  testing::ArrayDatasetSpec spec;
  const std::int64_t n = 7;
  spec.images = at::arange(n * 512 * 512, at::kInt).reshape({n, 1, 512, 512});
  spec.masks = (at::arange(n * 512 * 512, at::kInt) % 5).reshape({n, 512, 512}) + at::arange(n, at::kInt).view({n, 1, 1});
  spec.labels = at::arange(n * 2, at::kFloat).reshape({n, 2});
  testing::write_array_dataset(dir.file("big.h5"), spec);

  std::unique_ptr<WindowSource> in_order = open_array_dataset(dir.file("big.h5"));
  for (std::int64_t i = 0; i < n; ++i) require_row(*in_order, spec, i);

  std::unique_ptr<WindowSource> any_order = open_array_dataset(dir.file("big.h5"));
  for (std::int64_t i : {5, 3, 4, 5, 0, 6, 1, 2, 2}) require_row(*any_order, spec, i);

  // A window keeps its own row: a later read does not change what an earlier one returned.
  std::unique_ptr<WindowSource> kept = open_array_dataset(dir.file("big.h5"));
  const WindowData first = kept->read(0);
  for (std::int64_t i = 1; i < n; ++i) kept->read(std::size_t(i));
  REQUIRE(at::equal(first.pixels, spec.images[0]));
  REQUIRE(at::equal(first.mask, spec.masks[0]));
  REQUIRE(first.pixels.storage().nbytes() == first.pixels.nbytes());
}

TEST_CASE("array dataset: small windows in one block, class labels, a time axis") {
  testing::TempDir dir;
  testing::ArrayDatasetSpec spec;
  const std::int64_t n = 300;
  spec.images = (at::arange(n * 3 * 8 * 8, at::kInt) % 251).to(at::kByte).reshape({n, 3, 8, 8});
  spec.labels = at::arange(n, at::kLong) % 10;
  testing::write_array_dataset(dir.file("small.h5"), spec);
  std::unique_ptr<WindowSource> source = open_array_dataset(dir.file("small.h5"));
  for (std::int64_t i = 0; i < n; ++i) require_row(*source, spec, i);
  for (std::int64_t i : {17, 299, 0, 1, 150}) require_row(*source, spec, i);

  testing::ArrayDatasetSpec series;
  series.images = at::arange(4 * 2 * 3 * 4 * 4, at::kFloat).reshape({4, 2, 3, 4, 4});  // [N, T, C, H, W]
  testing::write_array_dataset(dir.file("series.h5"), series);
  std::unique_ptr<WindowSource> ts = open_array_dataset(dir.file("series.h5"));
  REQUIRE(ts->time_steps() == 2);
  for (std::int64_t i : {0, 1, 2, 3, 1}) require_row(*ts, series, i);
}

TEST_SUITE_END();
