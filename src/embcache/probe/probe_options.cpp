#include "embcache/probe/probe_options.hpp"

#include "embcache/probe/class_weights.hpp"
#include "embcache/probe/heads.hpp"
#include "embcache/probe/optimizer.hpp"
#include "embcache/probe/probe_plan.hpp"
#include "embcache/probe/temporal_pool.hpp"

namespace embcache {

const std::vector<OptionField<ProbeOptions>>& probe_fields() {
  using O = ProbeOptions;
  using F = OptionField<O>;
  using S = F::Shape;
  static const std::vector<F> fields = [] {
    OptionTable<O> t;
    t.add("cache", "Cache file written by precompute (repeat to train on several)", &O::caches).required = true;
    t.last().in_json = false;  // configs name a precompute entry or a path with "cache"
    t.add("out", "Run directory: metrics.json, history.csv, head.pt", &O::out).required = true;
    t.last().in_json = false;
    t.add("task", probe_tasks().choices(), &O::task).required = true;
    t.add("head", head_types().choices() + "; comma list = grid", &O::head).shape = S::kList;
    t.last().grid = true;
    t.add("levels", "Level name or index; comma list = grid; '+' joins levels of one head (1+2+3)", &O::levels).required = true;
    t.last().shape = S::kLevelSets;
    t.last().grid = true;
    t.add("num-classes", "Classes (default: from the labels)", &O::num_classes).show_default = false;
    t.add("ignore-index", "Mask value to ignore (default: the cache's ignore_index)", &O::ignore_index).show_default = false;
    t.add("hidden", "mlp: hidden widths (512 or 512,256); conv/fpn/unet: width (default 128); upernet: width (default 512)", &O::hidden).shape = S::kList;
    t.last().numeric = true;
    t.add("dropout", "mlp dropout", &O::dropout);
    t.add("conv-blocks", "conv: 3x3 conv blocks", &O::conv_blocks);
    t.add("temporal-pool", "Levels with a time axis: " + temporal_pools().choices() + " over time, before any head (and in head.pt)",
          &O::temporal_pool).identity_when_set = true;
    t.add("C", "logreg: inverse L2 strength (scikit-learn's C); comma list = grid; auto = 11 values 1e-6 ... 1e4",
          &O::C).shape = S::kList;
    t.last().grid = t.last().numeric = t.last().identity_when_set = true;
    t.add("k", "knn: neighbours that vote; comma list = grid (one top-k pass serves them all)", &O::k).shape = S::kList;
    t.last().grid = t.last().numeric = t.last().identity_when_set = true;
    t.add("knn-temperature", "knn: T of the vote's exp(cosine similarity / T) (DINO's 0.07)", &O::knn_temperature)
        .identity_when_set = true;
    t.add("class-weights", "Loss weights per class from the train split: " + class_weight_modes().choices() +
          " (balanced: N / (K n_c))",
          &O::class_weights).identity_when_set = true;
    t.add("optimizer", optimizer_kinds().choices(), &O::optimizer);
    t.add("lr", "Learning rate; comma list = grid", &O::lr).shape = S::kList;
    t.last().grid = t.last().numeric = true;
    t.add("weight-decay", "Weight decay; comma list = grid", &O::weight_decay).shape = S::kList;
    t.last().grid = t.last().numeric = true;
    t.add("epochs", "Epochs", &O::epochs);
    t.add("batch-size", "Rows per batch; auto = 64 for segmentation and pixel-regression, 256 otherwise", &O::batch_size);
    t.add("schedule", schedules().choices(), &O::schedule);
    t.add("warmup-epochs", "Linear warm-up (fractions allowed)", &O::warmup_epochs);
    t.add("seed", "Seed of initialisation, shuffling and dropout", &O::seed);
    t.add("seeds", "Train every combination once per seed (comma list) and report mean, std, IQM and a bootstrap "
          "interval over them; the best combination has the best mean val metric", &O::seeds).shape = S::kList;
    t.last().numeric = t.last().identity_when_set = true;
    t.last().in_json = false;  // a study lists seeds as "seed" (or "seeds"): one run per seed
    t.last().show_default = false;
    t.add("seed-mode", "--seeds: " + seed_modes().choices() + " (full: each seed its own batch order and dropout, "
          "exactly a lone run per seed; init: seeds differ in initialisation only, and share one pass)", &O::seed_mode).identity_when_set = true;
    t.add("train-fraction", "Train on nested subsets of the train split (whole windows, stratified by class); comma "
          "list = grid, e.g. 0.01,0.1,1", &O::train_fraction).shape = S::kList;
    t.last().grid = t.last().numeric = t.last().identity_when_set = true;
    t.add("patience", "Stop a head after this many epochs without a better val metric (0 = off)", &O::patience);
    t.add("label-smoothing", "Cross-entropy label smoothing", &O::label_smoothing);
    t.add("standardize", "Per-channel standardisation from train: " + standardize_modes().choices() +
          " (auto: linear, mlp, pixel-shuffle and logreg)", &O::standardize);
    t.add("train-split", "Split to train on", &O::train_split);
    t.add("val-split", "Split that picks the epoch and the combination", &O::val_split);
    t.add("test-split", "Split to report test metrics on", &O::test_split);
    t.add("val-fraction", "Carve this fraction of train windows into val when there is no val split", &O::val_fraction)
        .show_default = false;
    t.add("device", "auto, cpu, cuda or cuda:N", &O::device);
    t.add("threads", "Intra-op threads (0 = LibTorch's default, one per physical core, capped at the CPUs this process may run on; knn and logreg then use every one of those)", &O::threads);
    t.add("tier", "Where features live: " + tier_requests().choices(), &O::tier);
    t.add("gpu-memory-budget", "Bytes for the GPU tier (auto = half the free GPU memory)", &O::gpu_memory_budget);
    t.add("host-memory-budget", "Bytes for the host tier / stream buffer (auto = half the available RAM)", &O::host_memory_budget);
    t.add("bootstrap", "Resamples for 95% confidence intervals of the test metrics (0 = off)", &O::bootstrap);
    t.add("quiet", "No progress output", &O::quiet).in_json = false;
    return t.take();
  }();
  return fields;
}

nlohmann::json probe_options_to_json(const ProbeOptions& options) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& field : probe_fields()) {
    std::visit([&](auto member) { j[field.json_key()] = options.*member; }, field.member);
  }
  if (options.ignore_index == -1000000) j.erase("ignore_index");
  return j;
}

}  // namespace embcache
