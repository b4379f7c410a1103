#include "embcache/batch/pass_fusion.hpp"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "embcache/core/sha256.hpp"

namespace embcache {
namespace {

std::string shared_key(const ProbeRun& run) {
  nlohmann::json j = resolved_options_json(run.plan);
  for (const char* k : {"lr", "weight_decay", "C", "k", "train_fraction", "seed", "head", "levels", "out"}) j.erase(k);
  return run.group + "\n" + j.dump();
}

const ProbeCombination& combination_of(const ProbeRun& run) { return run.plan.grid.front(); }

template <typename T>
std::size_t count_distinct(const std::vector<T>& values) {
  return std::set<T>(values.begin(), values.end()).size();
}

// A pass of exactly these runs, when their (head, levels, lr, wd, C, k, fraction, seed) form a
// full grid (logreg runs differ in C, whose path a pass fits with warm starts; knn runs in k,
// which one top-k pass serves; the others have C and k 0).
std::optional<Pass> full_grid_pass(const Study& study, const std::vector<std::size_t>& group) {
  std::vector<std::string> heads, levels;
  std::vector<double> lrs, wds, cs, fractions;
  std::vector<std::int64_t> ks;
  std::vector<std::uint64_t> seeds;
  std::set<std::tuple<std::string, std::string, double, double, double, std::int64_t, double, std::uint64_t>> combos;
  for (auto r : group) {
    const ProbeCombination& c = combination_of(study.runs[r]);
    heads.push_back(head_name(c.head));
    levels.push_back(c.levels_text());
    lrs.push_back(c.lr);
    wds.push_back(c.weight_decay);
    cs.push_back(c.C);
    ks.push_back(c.k);
    fractions.push_back(c.train_fraction);
    seeds.push_back(c.seed);
    combos.insert({heads.back(), levels.back(), c.lr, c.weight_decay, c.C, c.k, c.train_fraction, c.seed});
  }
  const std::size_t grid = count_distinct(heads) * count_distinct(levels) * count_distinct(lrs) * count_distinct(wds) *
                           count_distinct(cs) * count_distinct(ks) * count_distinct(fractions) * count_distinct(seeds);
  if (combos.size() != group.size() || grid != group.size()) return std::nullopt;
  Pass pass;
  pass.runs = group;
  pass.plan = study.runs[group.front()].plan;
  pass.plan.grid.clear();
  std::string ids;
  for (auto r : group) {
    pass.plan.grid.push_back(combination_of(study.runs[r]));
    ids += study.runs[r].id;
  }
  pass.plan.options.out = study.output_dir + "/passes/" + sha256_hex(ids).substr(0, 12);
  return pass;
}

// Splits runs with the same shared key into passes whose (head, levels, lr, wd) form a full grid.
void add_passes(const Study& study, const std::vector<std::size_t>& runs, std::vector<Pass>* passes) {
  auto try_grid = [&](const std::vector<std::size_t>& group) {
    std::optional<Pass> pass = full_grid_pass(study, group);
    if (pass) passes->push_back(std::move(*pass));
    return pass.has_value();
  };
  if (try_grid(runs)) return;
  // Not a full grid (a zip, or some runs already finished): one pass per (head, levels), else alone.
  std::map<std::string, std::vector<std::size_t>> by_head;
  std::vector<std::string> order;
  for (auto r : runs) {
    const ProbeCombination& c = combination_of(study.runs[r]);
    const std::string k = std::string(head_name(c.head)) + "|" + c.levels_text();
    if (!by_head.count(k)) order.push_back(k);
    by_head[k].push_back(r);
  }
  for (const auto& k : order) {
    if (try_grid(by_head[k])) continue;
    for (auto r : by_head[k]) try_grid({r});
  }
}

}  // namespace

std::vector<Pass> fuse_runs(const Study& study, const std::vector<std::size_t>& runs) {
  std::map<std::string, std::vector<std::size_t>> buckets;
  std::vector<std::string> order;
  for (auto r : runs) {
    const std::string key = shared_key(study.runs[r]);
    if (!buckets.count(key)) order.push_back(key);
    buckets[key].push_back(r);
  }
  std::vector<Pass> passes;
  for (const auto& key : order) add_passes(study, buckets[key], &passes);
  return passes;
}

}  // namespace embcache
