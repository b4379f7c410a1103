// The typed plan of one precompute: every option of PrecomputeOptions resolved once into values
// (numbers, a device, enums), and what follows from the plan alone: the dataset reader, the
// cache signature and the size estimate. Built by the CLI and by studies; nothing below them
// reads option text.
#pragma once

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "embcache/core/label_kinds.hpp"
#include "embcache/dataset/crop_grid.hpp"
#include "embcache/dataset/cropper.hpp"
#include "embcache/dataset/rslearn_dataset.hpp"
#include "embcache/dataset/window_shard.hpp"
#include "embcache/encoder/encoder.hpp"
#include "embcache/encoder/level_layout.hpp"
#include "embcache/encoder/preprocess.hpp"
#include "embcache/pipeline/core_sharing.hpp"
#include "embcache/pipeline/precompute_options.hpp"
#include "embcache/store/cache_store.hpp"

namespace embcache {

class WindowSource;

enum class DatasetFormat { kArray, kRslearn };
// --format: a dataset format, or auto (rslearn when DATASET/windows exists).
enum class FormatRequest { kAuto, kArray, kRslearn };
const EnumTable<FormatRequest>& format_requests();

enum class OptimizeChoice { kAuto, kAlways, kNever };

struct PrecomputePlan {
  std::string encoder, dataset, out;  // paths as given
  std::string summary_json;           // "" = none; its directory exists
  DatasetFormat format = DatasetFormat::kArray;
  RslearnOptions rslearn;             // kRslearn only
  CropGridSpec grid;
  CropperOptions cropper;             // bands and pad value (the mask pad comes from the dataset)
  Preprocess preprocess;
  std::optional<std::int64_t> batch_size;  // nullopt: --batch-size auto
  c10::Device device{c10::kCPU};
  Amp amp = Amp::kNone;
  // --optimize (kAlways), --no-optimize (kNever), or neither (kAuto): whether the encoder is
  // frozen and optimised for inference (resolved per run by encoder_optimization).
  OptimizeChoice optimize = OptimizeChoice::kAuto;
  int threads = 1;                    // the encoder's intra-op threads (0 resolved to the cores)
  StorageOptions storage;
  std::vector<std::string> level_request;  // empty = every level
  LayoutOptions layout;                    // tokens, channels-last maps, time axes
  CommitPolicy policy;
  StageScheduling stage_scheduling = StageScheduling::kAuto;
  ShardSpec shard;                    // the windows this run processes (whole: all of them)
  bool overwrite = false, allow_nonfinite = false, quiet = false;
  bool only_new_windows = false;      // windows whose crops are all cached are not read (no staleness check)
  // Where the encoder file's hash is remembered between runs (FileHashMemo::from_environment);
  // nullopt: hashed on every run.
  std::optional<std::string> encoder_hash_memo;

  // The largest batch the encoder stage may form (sizes the crop queue).
  std::int64_t max_batch() const { return batch_size ? *batch_size : (device.is_cuda() ? 256 : 64); }
};

// Every UsageError (or IoError, for a --summary-json directory that does not exist) the options
// can cause by themselves, naming the option; opens neither the encoder nor the dataset.
PrecomputePlan plan_precompute(const PrecomputeOptions& options);

// The dataset reader the plan names, with the windows of its shard; `keep`, when set, leaves out
// the windows it refuses too (--only-new-windows), before anything is read ahead.
std::unique_ptr<WindowSource> open_window_source(const PrecomputePlan& plan,
                                                 std::function<bool(const WindowInfo&)> keep = {});
// What the plan needs of the dataset it opened: --bands within its channels, the per-channel
// mean/std lengths, and windows of one size when a crop is a whole window. Returns the channels
// the encoder gets.
std::int64_t check_window_source(const PrecomputePlan& plan, const WindowSource& source);

// The signature a cache made by this plan carries (docs/cache-format.md): what decides whether
// an existing cache may be extended.
// `optimized`: the run's encoder was frozen and optimised; `optimize_difference` then holds
// {output name: max |optimised - plain| / max |plain|} (null when nothing was measured).
nlohmann::json precompute_signature(const PrecomputePlan& plan, const std::string& encoder_sha256,
                                    const LabelKinds& labels, const nlohmann::json& source_fields,
                                    bool optimized = false, const nlohmann::json& optimize_difference = nullptr);

// How this run's encoder is optimised. kAlways and kNever as asked. kAuto: like the rows already
// in the cache (or committed by an interrupted run of this shard), so an existing cache is
// extended with the numerics it was made with; a new cache (or --overwrite) gets the encoder as
// loaded.
Optimization encoder_optimization(const PrecomputePlan& plan);

// What a precompute would produce, for `embcache run --dry-run`: the crop count of the dataset's
// grid and the feature bytes per crop (the encoder run once on zeros, on the CPU).
struct PrecomputeEstimate {
  std::int64_t windows = 0;
  std::int64_t crops = 0;
  std::int64_t bytes_per_crop = 0;
  std::vector<std::string> levels;  // "name [C, H, W]"
};
PrecomputeEstimate estimate_precompute(const PrecomputePlan& plan);

}  // namespace embcache
