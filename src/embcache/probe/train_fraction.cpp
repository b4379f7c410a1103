#include "embcache/probe/train_fraction.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"

namespace embcache {
namespace {

struct Window {
  std::uint64_t hash = 0;
  std::vector<std::int64_t> rows;
  std::int64_t stratum = 0;
};

std::vector<Window> windows_of(const TrainRowKeys& keys) {
  std::vector<Window> windows;
  std::unordered_map<std::uint64_t, std::size_t> index;
  for (std::size_t r = 0; r < keys.window.size(); ++r) {
    const auto [it, fresh] = index.try_emplace(keys.window[r], windows.size());
    if (fresh) windows.push_back(Window{keys.window[r], {}, 0});
    windows[it->second].rows.push_back(std::int64_t(r));
  }
  if (keys.label.empty()) return windows;
  for (auto& w : windows) {
    std::map<std::int64_t, std::int64_t> counts;  // ordered: a tie goes to the lower class
    for (auto r : w.rows) ++counts[keys.label[std::size_t(r)]];
    std::int64_t best = -1;
    for (const auto& [label, n] : counts) {
      if (best < 0 || n > counts[best]) best = label;
    }
    w.stratum = best;
  }
  return windows;
}

std::string class_text(const TrainRowKeys& keys, std::int64_t c) {
  const std::string id = std::to_string(c);
  return c >= 0 && std::size_t(c) < keys.class_names.size() ? id + " ('" + keys.class_names[std::size_t(c)] + "')" : id;
}

}  // namespace

std::vector<std::int64_t> fraction_rows(const TrainRowKeys& keys, double fraction) {
  if (!(fraction > 0 && fraction <= 1)) {
    throw UsageError(OptionName{"train-fraction"}, "expected fractions in (0, 1], got " + format_number(fraction));
  }
  std::vector<std::int64_t> out;
  if (fraction == 1) {
    for (std::size_t r = 0; r < keys.window.size(); ++r) out.push_back(std::int64_t(r));
    return out;
  }
  std::vector<Window> windows = windows_of(keys);
  // Per stratum, windows by hash (the first row breaks the rare tie), then a prefix of them.
  std::sort(windows.begin(), windows.end(), [](const Window& a, const Window& b) {
    if (a.stratum != b.stratum) return a.stratum < b.stratum;
    return a.hash != b.hash ? a.hash < b.hash : a.rows.front() < b.rows.front();
  });
  std::map<std::int64_t, std::int64_t> stratum_rows;
  for (const auto& w : windows) stratum_rows[w.stratum] += std::int64_t(w.rows.size());
  std::map<std::int64_t, std::int64_t> taken;
  for (const auto& w : windows) {
    std::int64_t& t = taken[w.stratum];
    if (t >= std::llround(fraction * double(stratum_rows[w.stratum]))) continue;
    t += std::int64_t(w.rows.size());
    out.insert(out.end(), w.rows.begin(), w.rows.end());
  }
  std::sort(out.begin(), out.end());
  if (!keys.label.empty()) {
    std::map<std::int64_t, std::int64_t> all, kept;
    for (auto c : keys.label) ++all[c];
    for (auto r : out) ++kept[keys.label[std::size_t(r)]];
    for (const auto& [c, n] : all) {
      if (kept[c] > 0) continue;
      throw InputError("--train-fraction " + format_number(fraction) + ": class " + class_text(keys, c) + " would have no "
                       "train rows (it has " + std::to_string(n) + "); use a fraction of at least " +
                       format_number(std::min(1.0, 1.0 / double(n))));
    }
  }
  return out;
}

}  // namespace embcache
