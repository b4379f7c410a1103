#include "embcache/cli/train_probe_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "embcache/probe/trainer.hpp"

namespace embcache {

void setup_train_probe(CLI::App& app) {
  auto o = std::make_shared<ProbeOptions>();
  CLI::App* sub = app.add_subcommand("train-probe", "Train probe heads on cached features; report metrics, curves and the best head");
  sub->add_option("--cache", o->caches, "Cache file written by precompute (repeat to train on several)")->required();
  sub->add_option("--out", o->out, "Run directory: metrics.json, history.csv, head.pt")->required();
  sub->add_option("--task", o->task, "classification, multilabel, segmentation, regression or pixel-regression")->required();
  sub->add_option("--head", o->head, "linear, mlp, conv, fpn, unet, pixel-shuffle; comma list = grid")->capture_default_str();
  sub->add_option("--levels", o->levels, "Level name or index; comma list = grid; '+' joins levels of one head (1+2+3)")->required();
  sub->add_option("--num-classes", o->num_classes, "Classes (default: from the labels)");
  sub->add_option("--ignore-index", o->ignore_index, "Mask value to ignore (default: the cache's ignore_index)");
  sub->add_option("--hidden", o->hidden, "mlp: hidden widths (512 or 512,256); conv/fpn/unet: width (default 128)");
  sub->add_option("--dropout", o->dropout, "mlp dropout")->capture_default_str();
  sub->add_option("--conv-blocks", o->conv_blocks, "conv: 3x3 conv blocks")->capture_default_str();
  sub->add_option("--optimizer", o->optimizer, "adamw or sgd")->capture_default_str();
  sub->add_option("--lr", o->lr, "Learning rate; comma list = grid")->capture_default_str();
  sub->add_option("--weight-decay", o->weight_decay, "Weight decay; comma list = grid")->capture_default_str();
  sub->add_option("--epochs", o->epochs, "Epochs")->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "Rows per batch")->capture_default_str();
  sub->add_option("--schedule", o->schedule, "cosine, constant or step")->capture_default_str();
  sub->add_option("--warmup-epochs", o->warmup_epochs, "Linear warm-up (fractions allowed)")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of initialisation, shuffling and dropout")->capture_default_str();
  sub->add_option("--patience", o->patience, "Stop a head after this many epochs without a better val metric (0 = off)")->capture_default_str();
  sub->add_option("--label-smoothing", o->label_smoothing, "Cross-entropy label smoothing")->capture_default_str();
  sub->add_option("--standardize", o->standardize, "Per-channel standardisation from train: auto (linear, mlp, pixel-shuffle), on, off")->capture_default_str();
  sub->add_option("--train-split", o->train_split, "Split to train on")->capture_default_str();
  sub->add_option("--val-split", o->val_split, "Split that picks the epoch and the combination")->capture_default_str();
  sub->add_option("--test-split", o->test_split, "Split to report test metrics on")->capture_default_str();
  sub->add_option("--val-fraction", o->val_fraction, "Carve this fraction of train windows into val when there is no val split");
  sub->add_option("--device", o->device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("--threads", o->threads, "Intra-op threads (0 = one per core)")->capture_default_str();
  sub->add_option("--tier", o->tier, "Where features live: auto, gpu, host or stream")->capture_default_str();
  sub->add_option("--gpu-memory-budget", o->gpu_memory_budget, "Bytes for the GPU tier (auto = half the free GPU memory)")->capture_default_str();
  sub->add_option("--host-memory-budget", o->host_memory_budget, "Bytes for the host tier / stream buffer (auto = half the available RAM)")->capture_default_str();
  sub->add_option("--bootstrap", o->bootstrap, "Resamples for 95% confidence intervals of the test metrics (0 = off)")->capture_default_str();
  sub->add_flag("--quiet", o->quiet, "No progress output");
  sub->callback([o] { run_train_probe_command(*o); });
}

void run_train_probe_command(const ProbeOptions& options) {
  const ProbeResult result = train_probe(options);
  std::printf("%s\n", result.summary.c_str());
  std::fflush(stdout);
}

}  // namespace embcache
