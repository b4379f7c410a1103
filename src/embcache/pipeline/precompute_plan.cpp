#include "embcache/pipeline/precompute_plan.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>

#include "embcache/host/cpu_info.hpp"
#include "embcache/host/device.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/limits.hpp"
#include "embcache/core/file_hash_memo.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/dataset/array_dataset.hpp"
#include "embcache/dataset/window_source.hpp"

namespace embcache {
namespace {

namespace fs = std::filesystem;

void check_paths(const PrecomputeOptions& o) {
  if (o.encoder.empty()) throw UsageError(OptionName{"encoder"}, "required (a TorchScript encoder file)");
  if (o.dataset.empty()) throw UsageError(OptionName{"dataset"}, "required (an array dataset or rslearn dataset root)");
  if (o.out.empty()) throw UsageError(OptionName{"out"}, "required (the cache file to create or extend)");
  std::error_code same_ec;
  if (fs::exists(o.out) && fs::equivalent(o.out, o.dataset, same_ec)) {
    throw UsageError(OptionName{"out"}, o.out + " is the dataset itself; choose another path for the cache");
  }
  if (!o.summary_json.empty()) {
    // Written at the end: a missing directory must not cost the whole run's exit status.
    const auto dir = fs::absolute(o.summary_json).parent_path();
    if (!fs::is_directory(dir)) {
      throw IoError("--summary-json " + o.summary_json + ": directory " + dir.string() + " does not exist; create it first");
    }
  }
}

// --format, and the rslearn reader's options (which an array dataset must not be given).
void plan_dataset(const PrecomputeOptions& o, PrecomputePlan& plan) {
  const FormatRequest format = format_requests().parse(o.format, {"format"});
  const bool rslearn = format == FormatRequest::kRslearn || (format == FormatRequest::kAuto && is_rslearn_root(o.dataset));
  plan.format = rslearn ? DatasetFormat::kRslearn : DatasetFormat::kArray;
  if (!rslearn) {
    const std::pair<const char*, const std::string*> rslearn_only[] = {
        {"layers", &o.layers}, {"groups", &o.groups}, {"window-names", &o.window_names},
        {"tags", &o.tags}, {"label-layer", &o.label_layer}};
    for (const auto& [name, value] : rslearn_only) {
      if (!value->empty()) throw UsageError(OptionName{name}, "applies to rslearn datasets; " + o.dataset + " is an array dataset");
    }
    return;
  }
  RslearnOptions& r = plan.rslearn;
  r.root = o.dataset;
  r.layers = o.layers;
  r.groups = o.groups;
  r.window_names = o.window_names;
  r.tags = o.tags;
  r.split_key = o.split_key;
  r.label_layer = o.label_layer;
  r.label_property = o.label_property;
  r.label_type = label_types().parse(o.label_type, {"label-type"});
  r.classes = o.classes;
  r.pad_value = o.pad_value;
  require_in_range(o.reader_threads, 0, kMaxReaderThreads, {"reader-threads"}, "a thread count");
  r.reader_threads = o.reader_threads;
  r.time_axis = o.time_axis;
}

// Crops, bands and preprocessing: what the encoder gets.
void plan_input(const PrecomputeOptions& o, PrecomputePlan& plan) {
  if (!o.crop_size.empty()) {
    const auto [w, h] = parse_size(o.crop_size, {"crop-size"});
    plan.grid.width = w;
    plan.grid.height = h;
  }
  plan.grid.overlap = o.overlap;
  plan.grid.validate();
  plan.cropper.pad_value = o.pad_value;
  if (!o.bands.empty()) plan.cropper.bands = parse_int_list(o.bands, {"bands"});
  plan.preprocess.scale = o.scale;
  plan.preprocess.mean = parse_double_list(o.mean, {"mean"});
  plan.preprocess.std = parse_double_list(o.std, {"std"});
  plan.preprocess.validate();
}

// The encoder's batches, device and threads.
void plan_encoder(const PrecomputeOptions& o, PrecomputePlan& plan) {
  if (o.batch_size != "auto") {
    plan.batch_size = parse_int(o.batch_size, {"batch-size"});
    require_in_range(*plan.batch_size, 1, kMaxEncoderBatch, {"batch-size"}, "auto or a number of crops");
  }
  plan.amp = amp_modes().parse(o.amp, {"amp"});
  if (o.optimize && o.no_optimize) throw UsageError(OptionName{"no-optimize"}, "contradicts --optimize; give one of the two");
  plan.optimize = o.optimize ? OptimizeChoice::kAlways : o.no_optimize ? OptimizeChoice::kNever : OptimizeChoice::kAuto;
  plan.shard = parse_shard(o.shard);
  plan.only_new_windows = o.only_new_windows;
  plan.encoder_hash_memo = FileHashMemo::from_environment().directory();
  plan.device = resolve_device(o.device);
  if (plan.amp != Amp::kNone && !plan.device.is_cuda()) throw UsageError(OptionName{"amp"}, "needs a CUDA device; on CPU use --amp none");
  require_in_range(o.threads, 0, kMaxThreads, {"threads"}, "0 (one per CPU this process may run on) or a thread count");
  plan.threads = o.threads > 0 ? o.threads : usable_cpus();
  if (!o.levels.empty()) plan.level_request = split_list(o.levels, {"levels"});
}

// "P" (every output) or "OUTPUT=P,OUTPUT=P" -> {"": P} or {OUTPUT: P}; values >= `least`.
std::map<std::string, std::int64_t> parse_per_output(const std::string& text, const char* option, std::int64_t least) {
  std::map<std::string, std::int64_t> values;
  if (text.empty()) return values;
  for (const std::string& item : split_list(text, {option})) {
    const auto eq = item.find('=');
    const std::string name = eq == std::string::npos ? "" : item.substr(0, eq);
    if (eq != std::string::npos && name.empty()) {
      throw UsageError(OptionName{option}, "expected N or OUTPUT=N,..., got \"" + item + "\"");
    }
    const std::int64_t v = parse_int(eq == std::string::npos ? item : item.substr(eq + 1), {option});
    if (v < least) throw UsageError(OptionName{option}, "must be at least " + std::to_string(least) + ", got " + std::to_string(v));
    if (!values.emplace(name, v).second) throw UsageError(OptionName{option}, "output \"" + name + "\" is given twice");
  }
  return values;
}

// How the encoder's outputs become levels.
void plan_layout(const PrecomputeOptions& o, PrecomputePlan& plan) {
  LayoutOptions& l = plan.layout;
  l.patch_size = parse_per_output(o.patch_size, "patch-size", 1);
  l.prefix_tokens = parse_per_output(o.prefix_tokens, "prefix-tokens", 0);
  l.keep_prefix_tokens = o.keep_prefix_tokens;
  if (!o.channels_last.empty()) l.channels_last = split_list(o.channels_last, {"channels-last"});
  if (!o.temporal_tokens.empty()) l.temporal_tokens = split_list(o.temporal_tokens, {"temporal-tokens"});
  for (const auto& name : l.channels_last) {
    if (std::find(l.temporal_tokens.begin(), l.temporal_tokens.end(), name) != l.temporal_tokens.end()) {
      throw UsageError(OptionName{"temporal-tokens"}, "output " + name + " is named by --channels-last too; a 4-D output is one of the two");
    }
  }
  l.time_axis = o.time_axis;
}

// Storage, commits and the stages' scheduling.
void plan_output(const PrecomputeOptions& o, PrecomputePlan& plan) {
  plan.storage.dtype = storage_dtypes().parse(o.dtype, {"dtype"});
  plan.storage.compression = Compression::parse(o.compression);
  if (plan.storage.dtype == StorageDtype::kInt8 && o.allow_nonfinite) {
    throw UsageError(OptionName{"allow-nonfinite"}, "--dtype int8 cannot store NaN/Inf features; drop --allow-nonfinite, "
                     "or store a float dtype (float32, float16, bfloat16) with it");
  }
  if (!(o.commit_seconds > 0 && o.commit_seconds <= double(kMaxCommitSeconds))) {
    throw UsageError(OptionName{"commit-seconds"}, "expected seconds above 0, at most " + std::to_string(kMaxCommitSeconds) +
                     ", got " + format_number(o.commit_seconds));
  }
  require_in_range(o.segment_mb, 1, kMaxSegmentMb, {"segment-mb"}, "MiB");
  plan.policy.segment_seconds = o.commit_seconds;
  plan.policy.segment_bytes = o.segment_mb << 20;
  plan.policy.fsync = o.fsync;
  plan.policy.drop_behind = o.drop_behind;
  plan.stage_scheduling = stage_schedulings().parse(o.stage_priority, {"stage-priority"});
  plan.overwrite = o.overwrite;
  plan.allow_nonfinite = o.allow_nonfinite;
  plan.quiet = o.quiet;
}

}  // namespace

const EnumTable<FormatRequest>& format_requests() {
  static const EnumTable<FormatRequest> table{
      {FormatRequest::kAuto, "auto"}, {FormatRequest::kArray, "array"}, {FormatRequest::kRslearn, "rslearn"}};
  return table;
}

PrecomputePlan plan_precompute(const PrecomputeOptions& options) {
  check_paths(options);
  PrecomputePlan plan;
  plan.encoder = options.encoder;
  plan.dataset = options.dataset;
  plan.out = options.out;
  plan.summary_json = options.summary_json;
  plan_input(options, plan);
  plan_encoder(options, plan);
  plan_layout(options, plan);
  plan_output(options, plan);
  plan_dataset(options, plan);
  return plan;
}

std::unique_ptr<WindowSource> open_window_source(const PrecomputePlan& plan, std::function<bool(const WindowInfo&)> keep) {
  const WindowFilter filter{plan.shard, std::move(keep)};
  if (plan.format == DatasetFormat::kArray) return filter_windows(open_array_dataset(plan.dataset), filter);
  return open_rslearn_dataset(plan.rslearn, filter);
}

namespace {

// Without --crop-size a crop is its whole window; a batch, and a level dataset, holds crops of
// one size, so the windows must all have one size.
void check_whole_windows(const WindowSource& source, const CropGridSpec& grid, const std::string& dataset) {
  if (grid.width || source.windows().empty()) return;
  const WindowInfo& first = source.windows().front();
  const WindowInfo* smallest = &first;
  const WindowInfo* other = nullptr;
  for (const WindowInfo& w : source.windows()) {
    const bool same = w.bounds.width() == first.bounds.width() && w.bounds.height() == first.bounds.height();
    if (!same && !other) other = &w;
    if (w.bounds.width() * w.bounds.height() < smallest->bounds.width() * smallest->bounds.height()) smallest = &w;
  }
  if (!other) return;
  auto size = [](const WindowInfo& w) { return std::to_string(w.bounds.width()) + "x" + std::to_string(w.bounds.height()); };
  throw UsageError(OptionName{"crop-size"}, dataset + " has windows of different sizes (" + first.group + "/" + first.name +
                   " is " + size(first) + ", " + other->group + "/" + other->name + " is " + size(*other) +
                   "); without --crop-size a crop is a whole window and a cache holds crops of one size: give "
                   "--crop-size (the smallest window is " + size(*smallest) + ")");
}

}  // namespace

std::int64_t check_window_source(const PrecomputePlan& plan, const WindowSource& source) {
  check_whole_windows(source, plan.grid, plan.dataset);
  const std::int64_t channels = source.channels();
  for (std::int64_t band : plan.cropper.bands) {
    if (band < 0 || band >= channels) {
      throw UsageError(OptionName{"bands"}, "band " + std::to_string(band) + " is out of range; " + plan.dataset + " has " +
                       std::to_string(channels) + " channels (0-" + std::to_string(channels - 1) + ")");
    }
  }
  if (plan.layout.time_axis && source.time_steps() == 0) {
    throw UsageError(OptionName{"time-axis"}, plan.dataset + " has no time axis (/images is [N, C, H, W]); drop "
                     "--time-axis, or store /images as [N, T, C, H, W]");
  }
  const std::int64_t input_channels = plan.cropper.bands.empty() ? channels : std::int64_t(plan.cropper.bands.size());
  plan.preprocess.validate(input_channels);
  return input_channels;
}

nlohmann::json precompute_signature(const PrecomputePlan& plan, const std::string& encoder_sha256,
                                    const LabelKinds& labels, const nlohmann::json& source_fields,
                                    bool optimized, const nlohmann::json& optimize_difference) {
  nlohmann::json signature;
  signature["format"] = kSignatureFormat;
  signature["encoder_sha256"] = encoder_sha256;
  signature["encoder_path"] = fs::absolute(plan.encoder).string();
  signature["dataset_path"] = fs::absolute(plan.dataset).string();
  signature["preprocessing"] = {{"scale", plan.preprocess.scale}, {"mean", plan.preprocess.mean}, {"std", plan.preprocess.std}};
  signature["bands"] = plan.cropper.bands;
  signature["crop_size"] = plan.grid.width ? nlohmann::json({*plan.grid.width, *plan.grid.height}) : nlohmann::json(nullptr);
  signature["overlap"] = plan.grid.overlap;
  signature["pad_value"] = plan.cropper.pad_value;
  signature["levels_requested"] = plan.level_request.empty() ? nlohmann::json("all") : nlohmann::json(plan.level_request);
  signature["dtype"] = to_string(plan.storage.dtype);
  signature["labels"] = label_kinds_to_json(labels);
  // Only when set: the signatures of caches made before these options existed stay as they were.
  if (plan.layout.any()) {
    const LayoutOptions& l = plan.layout;
    nlohmann::json layout = nlohmann::json::object();
    if (!l.patch_size.empty()) layout["patch_size"] = l.patch_size;
    if (!l.prefix_tokens.empty()) layout["prefix_tokens"] = l.prefix_tokens;
    if (l.keep_prefix_tokens) layout["keep_prefix_tokens"] = true;
    if (!l.channels_last.empty()) layout["channels_last"] = l.channels_last;
    if (!l.temporal_tokens.empty()) layout["temporal_tokens"] = l.temporal_tokens;
    if (l.time_axis) layout["time_axis"] = true;
    signature["level_layout"] = layout;
  }
  // Compared, and only when set: optimised and plain features never mix in one cache, and the
  // signatures of plain caches (all those made before --optimize existed) stay as they were.
  if (optimized) signature["encoder_optimization"] = kEncoderOptimization;
  signature["embcache_version"] = EMBCACHE_VERSION;
  // Informational: where and how these rows were computed. A cache of parts keeps each part's
  // (inspect lists them), and refuses parts whose amp differs (store/cache_parts.hpp).
  static const char* const kAmpNames[] = {"none", "fp16", "bf16"};
  signature["computed_with"] = {{"device", plan.device.str()}, {"torch", torch_version_running()},
                                {"amp", kAmpNames[int(plan.amp)]}, {"shard", plan.shard.text()}};
  if (optimized) signature["computed_with"]["optimize_difference"] = optimize_difference;
  for (const auto& [k, v] : source_fields.items()) signature[k] = v;
  return signature;
}

Optimization encoder_optimization(const PrecomputePlan& plan) {
  switch (plan.optimize) {
    case OptimizeChoice::kAlways:
      return Optimization::kRequired;
    case OptimizeChoice::kNever:
      return Optimization::kNone;
    case OptimizeChoice::kAuto:
      break;
  }
  // A new cache runs the encoder as loaded. Optimising moves features by more than the 1e-5 a
  // default may: once their batch norms hold statistics at a trained network's scale, folding
  // them moved MobileNetV2's outputs by up to 2e-5 of their largest value and ResNet-50's by up
  // to 1.2e-4 (docs/precompute.md, "Optimised encoders"). Rows already there keep the numerics they
  // were made with, optimised or not.
  if (plan.overwrite) return Optimization::kNone;
  const std::optional<Signature> existing = signature_of_existing_rows(plan.out, plan.shard.text());
  return existing && existing->contains("encoder_optimization") ? Optimization::kRequired : Optimization::kNone;
}

PrecomputeEstimate estimate_precompute(const PrecomputePlan& plan) {
  std::unique_ptr<WindowSource> source = open_window_source(plan);
  check_whole_windows(*source, plan.grid, plan.dataset);
  PrecomputeEstimate estimate;
  const auto& windows = source->windows();
  estimate.windows = std::int64_t(windows.size());
  for (const auto& w : windows) estimate.crops += std::int64_t(crop_grid(w.bounds, plan.grid).size());
  if (windows.empty()) return estimate;
  const std::int64_t channels = plan.cropper.bands.empty() ? source->channels() : std::int64_t(plan.cropper.bands.size());
  const std::int64_t h = plan.grid.height.value_or(windows.front().bounds.height());
  const std::int64_t w = plan.grid.width.value_or(windows.front().bounds.width());
  Encoder encoder(plan.encoder, c10::Device(c10::kCPU), Amp::kNone);
  std::vector<std::int64_t> input{1, channels, h, w};
  if (source->time_steps() > 0) input.insert(input.begin() + 1, source->time_steps());
  const at::Tensor zeros = at::zeros(input);
  const EncoderOutput out = encoder.forward(zeros);
  const LevelLayout layout(out, zeros, plan.layout);
  const StoredLevels stored = layout.apply(out);
  std::vector<LevelSpec> specs;
  for (auto i : layout.select(plan.level_request)) {
    const at::Tensor& level = stored.levels[i];
    LevelSpec spec;
    spec.name = stored.names[i];
    spec.origin = stored.origins[i];
    spec.row_shape.assign(level.sizes().begin() + 1, level.sizes().end());
    estimate.levels.push_back(spec.name + " " + spec.shape_text());
    specs.push_back(std::move(spec));
  }
  estimate.bytes_per_crop = row_feature_bytes(specs, plan.storage.dtype);
  return estimate;
}

}  // namespace embcache
