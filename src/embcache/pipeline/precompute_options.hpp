// Everything `embcache precompute` can be told; the CLI and JSON configs fill the same struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "embcache/core/option_field.hpp"

namespace embcache {

struct PrecomputeOptions {
  std::string encoder;
  std::string dataset;
  std::string out;
  std::string crop_size;  // "" (whole window), "S" or "WxH"
  std::int64_t overlap = 0;
  double pad_value = 0.0;
  std::string levels;  // "" = every level the encoder returns; else comma list of names/indices
  // How outputs become levels (docs/encoders.md): "P" or "OUTPUT=P,..."; lists of output names.
  std::string patch_size;
  std::string prefix_tokens;
  bool keep_prefix_tokens = false;
  std::string channels_last;
  std::string temporal_tokens;
  bool time_axis = false;
  std::string bands;   // "" = all channels
  double scale = 1.0;
  std::string mean = "0";
  std::string std = "1";
  std::string batch_size = "auto";
  std::string device = "auto";
  int threads = 0;  // 0 = one per CPU this process may run on (usable_cpus)
  std::string amp = "none";
  // The encoder frozen and optimised for inference (docs/precompute.md): --optimize always,
  // --no-optimize never; neither (auto) for new caches when the encoder can be frozen.
  bool optimize = false;
  bool no_optimize = false;
  std::string dtype = "float32";
  std::string compression = "none";
  bool overwrite = false;
  bool allow_nonfinite = false;
  bool quiet = false;
  std::string summary_json;
  double commit_seconds = 30.0;
  std::int64_t segment_mb = 1024;
  bool fsync = true;
  bool drop_behind = false;  // evict written features from the page cache once on disk
  std::string stage_priority = "auto";  // auto | idle | normal: scheduling of the non-encoder stages
  std::string shard;  // "" (the whole dataset), "I/N" or "slurm" (docs/scale-out.md)
  bool only_new_windows = false;  // skip windows whose crops are all cached, unread
  // Dataset format and the rslearn reader's options (docs/dataset-formats.md).
  std::string format = "auto";  // auto | array | rslearn
  std::string layers;
  std::string groups;
  std::string window_names;
  std::string tags;
  std::string split_key = "split";
  std::string label_layer;
  std::string label_property;
  std::string label_type = "auto";
  std::string classes;
  int reader_threads = 2;
};

// Every option of `embcache precompute`, in --help order.
const std::vector<OptionField<PrecomputeOptions>>& precompute_fields();

}  // namespace embcache
