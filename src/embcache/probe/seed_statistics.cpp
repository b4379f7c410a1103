#include "embcache/probe/seed_statistics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace embcache {

double interquartile_mean(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const std::size_t cut = values.size() / 4;  // scipy's trim_mean(x, 0.25) cuts int(0.25 n) each end
  const auto first = values.begin() + std::ptrdiff_t(cut), last = values.end() - std::ptrdiff_t(cut);
  return std::accumulate(first, last, 0.0) / double(last - first);
}

SeedSummary summarize_seeds(const std::vector<double>& values, std::int64_t resamples, std::uint64_t seed) {
  std::vector<double> v;
  for (double x : values) {
    if (std::isfinite(x)) v.push_back(x);
  }
  SeedSummary s;
  s.n = std::int64_t(v.size());
  if (v.empty()) {
    s.mean = s.std = s.iqm = s.ci_low = s.ci_high = NAN;
    return s;
  }
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.std = v.size() > 1 ? std::sqrt(ss / double(v.size() - 1)) : 0.0;
  s.iqm = interquartile_mean(v);
  // Percentile bootstrap over seeds (rliable's stratified bootstrap with one task).
  std::mt19937_64 gen(seed ^ 0xb0075ee5ull);
  std::uniform_int_distribution<std::size_t> pick(0, v.size() - 1);
  std::vector<double> stats(std::size_t(std::max<std::int64_t>(1, resamples)));
  std::vector<double> draw(v.size());
  for (auto& stat : stats) {
    for (auto& d : draw) d = v[pick(gen)];
    stat = interquartile_mean(draw);
  }
  std::sort(stats.begin(), stats.end());
  auto percentile = [&](double q) {
    const double pos = q * double(stats.size() - 1);
    const std::size_t lo = std::size_t(std::floor(pos));
    const std::size_t hi = std::min(stats.size() - 1, lo + 1);
    return stats[lo] + (pos - double(lo)) * (stats[hi] - stats[lo]);
  };
  s.ci_low = percentile(0.025);
  s.ci_high = percentile(0.975);
  return s;
}

nlohmann::json SeedSummary::to_json() const {
  auto value = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"n", n}, {"mean", value(mean)}, {"std", value(std)}, {"iqm", value(iqm)},
          {"ci95", nlohmann::json::array({value(ci_low), value(ci_high)})}};
}

}  // namespace embcache
