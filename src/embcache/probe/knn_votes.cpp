#include "embcache/probe/knn_votes.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/probe/every_core.hpp"
#include "embcache/probe/knn.hpp"
#include "embcache/probe/probe_pass.hpp"

namespace embcache {
namespace {

std::int64_t k_max(const ProbePass& pass, std::size_t bank) {
  std::int64_t k = 0;
  for (auto ci : pass.banks[bank].combos) k = std::max(k, pass.combos[ci].point().k);
  return k;
}

// Every k must find as many train rows (of its fraction).
void check_k(const ProbePass& pass, const TrainGroup& group) {
  const FractionRows& f = pass.fractions[group.fraction];
  for (auto b : group.banks) {
    const std::int64_t k = k_max(pass, b);
    if (k <= f.train_rows) continue;
    throw UsageError(OptionName{"k"}, std::to_string(k) + " is larger than the train split ('" + pass.data->train().name +
                     "', " + std::to_string(f.train_rows) + " rows" +
                     (f.fraction != 1 ? " at --train-fraction " + format_number(f.fraction) : std::string()) +
                     "); use a smaller --k");
  }
}

// Each combination's vote from its bank's neighbours: validation (as epoch 1) and test metrics.
void vote(ProbePass& pass, const std::vector<KnnNeighbours>& neighbours, const at::Tensor& y_val,
          const at::Tensor& y_test, Clock::time_point t0) {
  const ProbeData& data = *pass.data;
  const std::int64_t n_val = y_val.size(0);
  for (auto& c : pass.combos) {
    const ProbeCombination& p = c.point();
    CombinationResult& r = c.result;
    const at::Tensor scores = neighbours[c.bank].scores(p.k, data.num_outputs(), pass.options.knn_temperature);
    MetricAccumulator v(pass.task, data.num_outputs(), data.ignore_index(), 1);
    v.add(scores.narrow(0, 0, n_val).unsqueeze(0), y_val);
    r.best_epoch = 1;
    r.best_value = v.primary(0);
    r.val = v.result(0);
    if (pass.test_feed) {
      MetricAccumulator t(pass.task, data.num_outputs(), data.ignore_index(), 1);
      t.add(scores.narrow(0, n_val, y_test.size(0)).unsqueeze(0), y_test);
      r.test = t.result(0);
      if (pass.options.bootstrap > 0) r.test_ci95 = t.bootstrap(0, pass.options.bootstrap, p.seed);
    }
    pass.history.push_back({{"epoch", 1}, {"combination", r.id}, {"head", "knn"},
                            {"levels", pass.config_of(c).levels_text()}, {"lr_base", 0.0}, {"weight_decay", 0.0},
                            {"k", p.k}, {"train_loss", 0.0}, {"train_fraction", p.train_fraction}, {"seed", p.seed},
                            {"seconds", seconds_since(t0)}, {"val", scalar_metrics(r.val)}});
  }
}

}  // namespace

KnnVotes::KnnVotes(ProbePass& pass) : pass_(pass) {
  c10::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  const EveryCore cores(pass.options.threads);
  pass.threads = at::get_num_threads();
  at::Tensor y_val, y_test;
  const std::vector<at::Tensor> val = pass.pooled_split(*pass.val_feed, &y_val, true);
  std::vector<at::Tensor> test;
  if (pass.test_feed) test = pass.pooled_split(*pass.test_feed, &y_test, true);
  std::vector<KnnNeighbours> neighbours;
  for (std::size_t i = 0; i < pass.banks.size(); ++i) {
    neighbours.emplace_back(pass.test_feed ? at::cat({val[i], test[i]}) : val[i], k_max(pass, i));
  }
  // The train bank is kept for head.pt where the tier holds the train split anyway.
  const bool keep = pass.tier != FeedTier::kStream;
  banks_.assign(pass.banks.size(), at::Tensor());
  labels_.assign(pass.fractions.size(), at::Tensor());
  for (const auto& group : pass.groups) {
    check_k(pass, group);
    pass.use_fraction(group.fraction);
    std::vector<std::vector<at::Tensor>> bank(pass.banks.size());
    std::vector<at::Tensor> bank_labels;
    pass.train_feed->start(false, 0);
    while (auto batch = pass.train_feed->next()) {
      for (auto i : group.banks) {
        const at::Tensor t = l2_normalize(pass.banks[i].heads.pooled_features(pass.bank_inputs(i, *batch)));
        neighbours[i].add(t, batch->targets);
        if (keep) bank[i].push_back(t);
      }
      if (keep) bank_labels.push_back(batch->targets);
    }
    for (auto i : group.banks) {
      if (keep) banks_[i] = at::cat(bank[i]);
    }
    if (keep) labels_[group.fraction] = at::cat(bank_labels);
    pass.samples_trained += pass.fractions[group.fraction].train_rows;
  }
  if (!keep) {
    pass.warnings.push_back("no head.pt: a k-NN head holds the train split, which did not fit the memory budget and "
                            "was streamed; raise --host-memory-budget to export it");
  }
  vote(pass, neighbours, y_val, y_test, t0);
  pass.train_seconds = seconds_since(t0);
  pass.epochs_run = 1;
}

std::function<void(const std::string&)> KnnVotes::head_saver(const Combination& c) const {
  if (!banks_.at(c.bank).defined()) return {};  // streamed: no head.pt (the constructor warned)
  const at::Tensor& features = banks_[c.bank];
  const at::Tensor& labels = labels_.at(pass_.groups[c.group].fraction);
  const std::int64_t k = c.point().k, classes = pass_.data->num_outputs();
  const double temperature = pass_.options.knn_temperature;
  return [&features, &labels, k, classes, temperature](const std::string& path) {
    save_knn_head(path, features, labels, k, classes, temperature);
  };
}

}  // namespace embcache
