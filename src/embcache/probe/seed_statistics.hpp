// Summaries of one metric over the seeds of a combination: mean, sample standard deviation,
// interquartile mean (GEO-Bench-2, rliable) and a percentile bootstrap interval of that mean.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace embcache {

struct SeedSummary {
  std::int64_t n = 0;
  double mean = 0, std = 0;  // std: sample (n - 1); 0 for one seed
  double iqm = 0;            // scipy.stats.trim_mean(values, 0.25): floor(n/4) values cut at each end
  double ci_low = 0, ci_high = 0;  // 2.5 and 97.5 percentiles of the IQM over seed resamples
  nlohmann::json to_json() const;  // {"n", "mean", "std", "iqm", "ci95": [low, high]}
};

// Resamples: seeds drawn with replacement `resamples` times from a generator seeded by `seed`,
// so the interval is reproducible. Non-finite values (a seed without a result) are left out;
// with none left, n is 0 and the numbers are NaN (null in JSON).
SeedSummary summarize_seeds(const std::vector<double>& values, std::int64_t resamples = 10000, std::uint64_t seed = 0);

// The interquartile mean of `values` (sorted inside).
double interquartile_mean(std::vector<double> values);

}  // namespace embcache
