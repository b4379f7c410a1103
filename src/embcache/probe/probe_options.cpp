#include "embcache/probe/probe_options.hpp"

namespace embcache {

const std::vector<OptionField<ProbeOptions>>& probe_fields() {
  using O = ProbeOptions;
  using F = OptionField<O>;
  using S = F::Shape;
  static const std::vector<F> fields = [] {
    std::vector<F> f;
    auto add = [&](const char* name, const char* help, F::Member member) -> F& {
      f.push_back(F{name, help, member});
      return f.back();
    };
    add("cache", "Cache file written by precompute (repeat to train on several)", &O::caches).required = true;
    f.back().in_json = false;  // configs name a precompute entry or a path with "cache"
    add("out", "Run directory: metrics.json, history.csv, head.pt", &O::out).required = true;
    f.back().in_json = false;
    add("task", "classification, multilabel, segmentation, regression or pixel-regression", &O::task).required = true;
    add("head", "linear, mlp, conv, fpn, unet, pixel-shuffle; comma list = grid", &O::head).shape = S::kList;
    f.back().grid = true;
    add("levels", "Level name or index; comma list = grid; '+' joins levels of one head (1+2+3)", &O::levels).required = true;
    f.back().shape = S::kLevelSets;
    f.back().grid = true;
    add("num-classes", "Classes (default: from the labels)", &O::num_classes).show_default = false;
    add("ignore-index", "Mask value to ignore (default: the cache's ignore_index)", &O::ignore_index).show_default = false;
    add("hidden", "mlp: hidden widths (512 or 512,256); conv/fpn/unet: width (default 128)", &O::hidden).shape = S::kList;
    f.back().numeric = true;
    add("dropout", "mlp dropout", &O::dropout);
    add("conv-blocks", "conv: 3x3 conv blocks", &O::conv_blocks);
    add("optimizer", "adamw or sgd", &O::optimizer);
    add("lr", "Learning rate; comma list = grid", &O::lr).shape = S::kList;
    f.back().grid = f.back().numeric = true;
    add("weight-decay", "Weight decay; comma list = grid", &O::weight_decay).shape = S::kList;
    f.back().grid = f.back().numeric = true;
    add("epochs", "Epochs", &O::epochs);
    add("batch-size", "Rows per batch", &O::batch_size);
    add("schedule", "cosine, constant or step", &O::schedule);
    add("warmup-epochs", "Linear warm-up (fractions allowed)", &O::warmup_epochs);
    add("seed", "Seed of initialisation, shuffling and dropout", &O::seed);
    add("patience", "Stop a head after this many epochs without a better val metric (0 = off)", &O::patience);
    add("label-smoothing", "Cross-entropy label smoothing", &O::label_smoothing);
    add("standardize", "Per-channel standardisation from train: auto (linear, mlp, pixel-shuffle), on, off", &O::standardize);
    add("train-split", "Split to train on", &O::train_split);
    add("val-split", "Split that picks the epoch and the combination", &O::val_split);
    add("test-split", "Split to report test metrics on", &O::test_split);
    add("val-fraction", "Carve this fraction of train windows into val when there is no val split", &O::val_fraction)
        .show_default = false;
    add("device", "auto, cpu, cuda or cuda:N", &O::device);
    add("threads", "Intra-op threads (0 = one per core)", &O::threads);
    add("tier", "Where features live: auto, gpu, host or stream", &O::tier);
    add("gpu-memory-budget", "Bytes for the GPU tier (auto = half the free GPU memory)", &O::gpu_memory_budget);
    add("host-memory-budget", "Bytes for the host tier / stream buffer (auto = half the available RAM)", &O::host_memory_budget);
    add("bootstrap", "Resamples for 95% confidence intervals of the test metrics (0 = off)", &O::bootstrap);
    add("quiet", "No progress output", &O::quiet).in_json = false;
    return f;
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
