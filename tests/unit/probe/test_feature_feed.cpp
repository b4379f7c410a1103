// The feature feed alone: each tier delivers every row of a split exactly once per pass, through
// its producer thread and bounded queue (the ThreadSanitizer leg runs this too).
#include "doctest_torch.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "embcache/pipeline/precompute.hpp"
#include "embcache/probe/feature_feed.hpp"
#include "embcache/probe/probe_data.hpp"
#include "embcache/store/cache_reader.hpp"
#include "test_support.hpp"

using namespace embcache;

namespace {

// Row ids of one pass, in the order the feed delivered them, and the batch sizes.
std::vector<std::int64_t> one_pass(FeatureFeed& feed, bool shuffle, std::uint64_t seed, std::vector<std::int64_t>* sizes) {
  std::vector<std::int64_t> ids;
  feed.start(shuffle, seed);
  while (auto batch = feed.next()) {
    const at::Tensor b = batch->ids.contiguous();
    sizes->push_back(b.size(0));
    REQUIRE(batch->columns.front().size(0) == b.size(0));
    REQUIRE(batch->targets.size(0) == b.size(0));
    ids.insert(ids.end(), b.data_ptr<std::int64_t>(), b.data_ptr<std::int64_t>() + b.size(0));
  }
  return ids;
}

}  // namespace

TEST_SUITE("probe") {

TEST_CASE("feature feed: host and stream tiers deliver every row of a split once per pass, shuffled by seed") {
  testing::TempDir dir;
  const ProbeData data(testing::small_classification_probe(dir, 24, 4), ProbeTask::kClassification);
  const std::int64_t n = data.train().size();
  REQUIRE(n == 18 * 4);
  const std::vector<FeedColumn> columns = {level_column(data, data.levels().front(), /*pooled=*/true)};
  const std::int64_t row_bytes = resident_row_bytes(columns);
  for (FeedTier tier : {FeedTier::kHost, FeedTier::kStream}) {
    CAPTURE(tier_name(tier));
    // A stream buffer of 20 rows refills several times per pass.
    FeatureFeed feed(data, 0, columns, tier, c10::Device(c10::kCPU), 7, 20 * row_bytes);
    REQUIRE(feed.rows() == n);
    std::vector<std::int64_t> sizes;
    const std::vector<std::int64_t> in_order = one_pass(feed, false, 0, &sizes);
    std::vector<std::int64_t> all(static_cast<std::size_t>(n), 0);
    for (std::int64_t i = 0; i < n; ++i) all[std::size_t(i)] = i;
    if (tier == FeedTier::kHost) REQUIRE(in_order == all);  // the stream reads in block order
    REQUIRE(std::int64_t(sizes.size()) == feed.batches_per_epoch());
    for (std::uint64_t seed : {1u, 2u}) {
      std::vector<std::int64_t> shuffled_sizes;
      std::vector<std::int64_t> ids = one_pass(feed, true, seed, &shuffled_sizes);
      REQUIRE(ids != all);
      std::sort(ids.begin(), ids.end());
      REQUIRE(ids == all);
    }
    // The same seed gives the same order.
    std::vector<std::int64_t> s1, s2;
    REQUIRE(one_pass(feed, true, 5, &s1) == one_pass(feed, true, 5, &s2));
  }
}

TEST_CASE("feature feed: int8 maps are held as int8 with their scales and delivered de-quantised; time axes reduced") {
  testing::TempDir dir;
  testing::ArrayDatasetSpec spec;
  spec.images = at::randint(0, 255, {8, 3, 16, 16}).to(at::kByte);
  spec.labels = at::arange(8, at::kLong) % 2;
  testing::write_array_dataset(dir.file("data.h5"), spec);
  PrecomputeOptions po = testing::small_precompute("multi_scripted.pt", dir.file("data.h5"), dir.file("q.h5"));
  po.dtype = "int8";
  run_precompute(plan_precompute(po));
  ProbeOptions o;
  o.caches = {dir.file("q.h5")};
  o.task = "classification";
  o.val_fraction = 0.25;
  const ProbeData data(o, ProbeTask::kClassification);
  const CacheReader& cache = *data.caches().front();
  const LevelSpec& level = data.level("1");  // [16, 4, 4]
  const FeedColumn column = level_column(data, level, /*pooled=*/false);
  REQUIRE(column.quantized);
  CHECK(column.resident_row_bytes == 16 * 16 + 4 * 16);
  for (FeedTier tier : {FeedTier::kHost, FeedTier::kStream}) {
    CAPTURE(tier_name(tier));
    FeatureFeed feed(data, 0, {column}, tier, c10::Device(c10::kCPU), 5, 1 << 20);
    feed.start(false, 0);
    std::vector<at::Tensor> got;
    std::vector<std::int64_t> ids;
    while (auto batch = feed.next()) {
      got.push_back(batch->columns.front());
      const at::Tensor b = batch->ids.contiguous();
      ids.insert(ids.end(), b.data_ptr<std::int64_t>(), b.data_ptr<std::int64_t>() + b.size(0));
    }
    const at::Tensor delivered = at::cat(got);
    REQUIRE((delivered.scalar_type() == at::kFloat));
    // Split-local row i is cache row data.train().rows[0][i].
    const auto& rows = data.train().rows.front();
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const std::int64_t row = rows[std::size_t(ids[k])];
      const at::Tensor want = cache.read_level(level, row, 1).to(at::kFloat) * cache.read_scales(level, row, 1).view({1, 16, 1, 1});
      REQUIRE(at::equal(delivered[std::int64_t(k)], want[0]));
    }
  }
}

TEST_CASE("feature feed: restrict_rows limits later passes of every tier to those rows, once each") {
  testing::TempDir dir;
  const ProbeData data(testing::small_classification_probe(dir, 30, 5), ProbeTask::kClassification);
  const std::int64_t n = data.train().size();
  const std::vector<FeedColumn> columns = {level_column(data, data.levels().front(), /*pooled=*/true)};
  std::vector<std::int64_t> subset;
  for (std::int64_t i = 0; i < n; i += 3) subset.push_back(i);
  subset.push_back(n - 1);
  for (FeedTier tier : {FeedTier::kHost, FeedTier::kStream}) {
    CAPTURE(tier_name(tier));
    FeatureFeed feed(data, 0, columns, tier, c10::Device(c10::kCPU), 5, 10 * resident_row_bytes(columns));
    feed.restrict_rows(subset);
    REQUIRE(feed.rows() == std::int64_t(subset.size()));
    for (bool shuffle : {false, true}) {
      std::vector<std::int64_t> sizes;
      std::vector<std::int64_t> ids = one_pass(feed, shuffle, 4, &sizes);
      REQUIRE(std::int64_t(sizes.size()) == feed.batches_per_epoch());
      std::sort(ids.begin(), ids.end());
      REQUIRE(ids == subset);
    }
    feed.restrict_rows({});
    std::vector<std::int64_t> sizes;
    REQUIRE(std::int64_t(one_pass(feed, true, 4, &sizes).size()) == n);
  }
}

}  // TEST_SUITE
