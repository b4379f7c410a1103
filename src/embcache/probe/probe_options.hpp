// Everything `embcache train-probe` can be told; the CLI and JSON configs fill the same struct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "embcache/core/option_field.hpp"

namespace embcache {

struct ProbeOptions {
  std::vector<std::string> caches;
  std::string out;
  std::string task;                 // classification | multilabel | segmentation | regression | pixel-regression
  std::string head = "linear";      // comma list: grid over head types
  std::string levels;               // comma list of level sets; '+' joins levels in one set ("2+3,4")
  std::int64_t num_classes = 0;     // 0 = from the labels
  std::int64_t ignore_index = -1000000;  // sentinel: use the cache's mask ignore_index
  std::string hidden = "";          // mlp: hidden widths "512" or "512,256"; conv/fpn/unet: one width
  double dropout = 0.1;             // mlp
  std::int64_t conv_blocks = 2;     // conv
  std::string temporal_pool = "mean";
  std::string class_weights = "none";  // none | balanced | inverse-sqrt
  std::string C = "auto";              // logreg: inverse regularisation strengths (comma list = grid)
  std::string k = "20";                // knn: neighbours (comma list = grid)
  double knn_temperature = 0.07;       // knn: the vote's exp(similarity / T)
  std::string optimizer = "adamw";
  std::string lr = "1e-3";          // comma list: grid
  std::string weight_decay = "0";   // comma list: grid
  std::int64_t epochs = 20;
  std::string batch_size = "auto";  // rows per batch; auto: 64 for dense tasks, 256 otherwise
  std::string schedule = "cosine";  // cosine | constant | step
  double warmup_epochs = 0.0;
  std::uint64_t seed = 0;
  std::string seeds = "";           // comma list: every combination once per seed, summarised over them
  std::string seed_mode = "full";   // full | init
  std::string train_fraction = "1";  // comma list = grid: nested subsets of the train split
  std::int64_t patience = 0;        // 0 = no early stopping
  double label_smoothing = 0.0;
  std::string standardize = "auto";  // auto (linear, mlp, pixel-shuffle) | on | off
  std::string train_split = "train";
  std::string val_split = "val";
  std::string test_split = "test";
  double val_fraction = 0.0;        // > 0: carve val from train when the cache has no val rows
  std::string device = "auto";
  int threads = 0;
  std::string tier = "auto";        // auto | gpu | host | stream
  std::string gpu_memory_budget = "auto";   // bytes ("8G", "512M") or auto = half the free GPU memory
  std::string host_memory_budget = "auto";  // auto = half the available RAM
  std::int64_t bootstrap = 0;
  bool quiet = false;
};

// Every option of `embcache train-probe`, in --help order.
const std::vector<OptionField<ProbeOptions>>& probe_fields();
// The options as a JSON object keyed like configs (metrics.json "options", run ids).
nlohmann::json probe_options_to_json(const ProbeOptions& options);

}  // namespace embcache
