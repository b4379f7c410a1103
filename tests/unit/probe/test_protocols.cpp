// The evaluation protocols' pure parts: summaries over seeds, nested label fractions, and bank
// members initialised from their own seeds.
#include "doctest_torch.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "embcache/core/error.hpp"
#include "embcache/probe/heads.hpp"
#include "embcache/probe/seed_statistics.hpp"
#include "embcache/probe/train_fraction.hpp"

using namespace embcache;

namespace {

// 200 windows of 1 to 4 crops each; classes 0..3 in a 8:4:2:1 mix (by window).
TrainRowKeys keys_of_windows() {
  TrainRowKeys keys;
  const std::int64_t class_of[15] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3};
  for (std::int64_t w = 0; w < 200; ++w) {
    for (std::int64_t c = 0; c <= w % 4; ++c) {
      keys.window.push_back(0x9e3779b97f4a7c15ull * std::uint64_t(w + 1));
      keys.label.push_back(class_of[w % 15]);
    }
  }
  keys.class_names = {"water", "forest", "crops", "urban"};
  return keys;
}

std::string input_error(const TrainRowKeys& keys, double f) {
  try {
    fraction_rows(keys, f);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("probe") {

TEST_CASE("seed summaries: IQM as scipy's trim_mean(x, 0.25), sample std, a bootstrap interval around the IQM") {
  CHECK(interquartile_mean({1, 2, 3, 4, 5, 6, 7, 8}) == doctest::Approx(4.5));  // 3..6
  CHECK(interquartile_mean({100, 1, 3, 2, 4}) == doctest::Approx(3.0));         // cuts 1 and 100
  CHECK(interquartile_mean({0.5, 0.7, 0.9}) == doctest::Approx(0.7));           // n < 4: the mean
  const SeedSummary s = summarize_seeds({0.61, 0.64, 0.60, 0.66, 0.63});
  CHECK(s.n == 5);
  CHECK(s.mean == doctest::Approx(0.628));
  CHECK(s.std == doctest::Approx(0.023874672772626644));  // numpy.std(ddof=1)
  CHECK(s.iqm == doctest::Approx((0.61 + 0.63 + 0.64) / 3));
  CHECK(s.ci_low >= 0.60);
  CHECK(s.ci_low < s.iqm);
  CHECK(s.ci_high > s.iqm);
  CHECK(s.ci_high <= 0.66);
  const SeedSummary again = summarize_seeds({0.61, 0.64, 0.60, 0.66, 0.63});
  CHECK(again.ci_low == s.ci_low);  // reproducible
  CHECK(again.ci_high == s.ci_high);
  // A seed without a result is left out; one seed has no spread; none has no numbers.
  const SeedSummary some = summarize_seeds({0.5, NAN, 0.7});
  CHECK(some.n == 2);
  CHECK(some.mean == doctest::Approx(0.6));
  CHECK(summarize_seeds({0.5}).std == 0.0);
  CHECK(summarize_seeds({NAN}).n == 0);
  CHECK(summarize_seeds({NAN}).to_json()["mean"].is_null());
}

TEST_CASE("train fractions: nested, whole windows, stratified by class, deterministic from the keys") {
  const TrainRowKeys keys = keys_of_windows();
  const std::size_t n = keys.window.size();
  CHECK(fraction_rows(keys, 1).size() == n);
  std::vector<std::int64_t> previous;
  for (double f : {0.05, 0.1, 0.5, 1.0}) {
    CAPTURE(f);
    const std::vector<std::int64_t> rows = fraction_rows(keys, f);
    REQUIRE(std::is_sorted(rows.begin(), rows.end()));
    // Nested: every row of the smaller fraction is in this one.
    REQUIRE(std::includes(rows.begin(), rows.end(), previous.begin(), previous.end()));
    previous = rows;
    // Whole windows: a window's crops are all in or all out.
    std::map<std::uint64_t, std::pair<int, int>> in_out;
    const std::set<std::int64_t> chosen(rows.begin(), rows.end());
    for (std::size_t r = 0; r < n; ++r) (chosen.count(std::int64_t(r)) ? in_out[keys.window[r]].first : in_out[keys.window[r]].second)++;
    for (const auto& [w, io] : in_out) REQUIRE((io.first == 0 || io.second == 0));
    // Stratified: each class gets its share, give or take one window (at most 4 crops).
    std::map<std::int64_t, double> all, kept;
    for (std::size_t r = 0; r < n; ++r) all[keys.label[r]] += 1;
    for (auto r : rows) kept[keys.label[std::size_t(r)]] += 1;
    for (const auto& [c, count] : all) {
      CAPTURE(c);
      CHECK(kept[c] >= std::round(f * count));
      CHECK(kept[c] <= std::round(f * count) + 3);
    }
  }
  // The same keys in another row order select the same crops.
  TrainRowKeys reversed = keys;
  std::reverse(reversed.window.begin(), reversed.window.end());
  std::reverse(reversed.label.begin(), reversed.label.end());
  std::set<std::uint64_t> wa, wb;  // the windows chosen
  for (auto r : fraction_rows(keys, 0.1)) wa.insert(keys.window[std::size_t(r)]);
  for (auto r : fraction_rows(reversed, 0.1)) wb.insert(reversed.window[std::size_t(r)]);
  CHECK(wa == wb);
}

TEST_CASE("train fractions: a class left without rows is named; fractions outside (0, 1] are refused") {
  const TrainRowKeys keys = keys_of_windows();
  // "urban" has 13 windows (33 rows): 1% of it rounds to no row.
  const std::string e = input_error(keys, 0.01);
  CHECK(e.find("--train-fraction 0.01: class 3 ('urban') would have no train rows (it has") != std::string::npos);
  CHECK(e.find("use a fraction of at least") != std::string::npos);
  for (double bad : {0.0, -0.1, 1.5}) CHECK_THROWS_AS(fraction_rows(keys, bad), UsageError);
  // Without classes (regression, segmentation) windows are the only strata.
  TrainRowKeys plain = keys;
  plain.label.clear();
  CHECK(!fraction_rows(plain, 0.01).empty());
}

TEST_CASE("head banks: a member initialised from its own seed starts where a lone head with that seed does") {
  HeadConfig config;
  config.task = ProbeTask::kClassification;
  config.levels = {"0"};
  config.level_shapes = {{6, 3, 3}};
  config.outputs = 4;
  config.type = HeadType::kMlp;
  config.hidden = {8};
  const c10::Device cpu(c10::kCPU);
  HeadBank bank(config, std::vector<std::uint64_t>{5, 9, 5}, 5, cpu);
  for (auto [member, seed] : {std::pair<std::int64_t, std::uint64_t>{0, 5}, {1, 9}, {2, 5}}) {
    HeadBank alone(config, 1, seed, cpu);
    const auto a = bank.member_state(member), b = alone.member_state(0);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(at::equal(a[i], b[i]));
  }
  const auto m0 = bank.member_state(0), m1 = bank.member_state(1);
  CHECK(!at::equal(m0.front(), m1.front()));
}

}  // TEST_SUITE
