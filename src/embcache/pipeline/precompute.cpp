#include "embcache/pipeline/precompute.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "embcache/core/clock.hpp"
#include "embcache/core/crop_key.hpp"
#include "embcache/core/device.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/core/pixel_hash.hpp"
#include "embcache/core/progress.hpp"
#include "embcache/core/sha256.hpp"
#include "embcache/dataset/array_dataset.hpp"
#include "embcache/dataset/crop_grid.hpp"
#include "embcache/dataset/cropper.hpp"
#include "embcache/dataset/rslearn_dataset.hpp"
#include "embcache/encoder/allocator_scope.hpp"
#include "embcache/encoder/encoder.hpp"
#include "embcache/encoder/preprocess.hpp"
#include "embcache/pipeline/batch_size_search.hpp"
#include "embcache/core/bounded_queue.hpp"
#include "embcache/core/stop_request.hpp"
#include "embcache/pipeline/core_sharing.hpp"
#include "embcache/store/cache_store.hpp"
#include "embcache/store/finite_check.hpp"
#include "embcache/store/fletcher32.hpp"

namespace embcache {
namespace {

// Options turned into typed values; every UsageError is raised here, before any work.
struct Resolved {
  CropGridSpec grid;
  CropperOptions cropper;
  Preprocess preprocess;
  std::int64_t batch_size = 0;  // 0 = auto
  c10::Device device{c10::kCPU};
  Amp amp = Amp::kNone;
  int threads = 1;
  StorageOptions storage;
  std::vector<std::string> level_request;  // empty = all
  CommitPolicy policy;
  std::string stage_priority = "auto";  // idle | normal | auto (idle, normal once the encoder proves light)
};

Resolved resolve(const PrecomputeOptions& o) {
  Resolved r;
  if (o.encoder.empty()) throw UsageError("--encoder is required");
  if (o.dataset.empty()) throw UsageError("--dataset is required");
  if (o.out.empty()) throw UsageError("--out is required");
  std::error_code same_ec;
  if (std::filesystem::exists(o.out) && std::filesystem::equivalent(o.out, o.dataset, same_ec)) {
    throw UsageError("--out " + o.out + " is the dataset itself; choose another path for the cache");
  }
  if (!o.summary_json.empty()) {
    // Written at the end: a missing directory must not cost the whole run's exit status.
    const auto dir = std::filesystem::absolute(o.summary_json).parent_path();
    if (!std::filesystem::is_directory(dir)) {
      throw IoError("--summary-json " + o.summary_json + ": directory " + dir.string() + " does not exist; create it first");
    }
  }
  if (!o.crop_size.empty()) {
    const auto [w, h] = parse_size(o.crop_size, "--crop-size");
    r.grid.width = w;
    r.grid.height = h;
  }
  r.grid.overlap = o.overlap;
  r.grid.validate();
  r.cropper.pad_value = o.pad_value;
  if (!o.bands.empty()) r.cropper.bands = parse_int_list(o.bands, "--bands");
  r.preprocess.scale = o.scale;
  r.preprocess.mean = parse_double_list(o.mean, "--mean");
  r.preprocess.std = parse_double_list(o.std, "--std");
  r.preprocess.validate();
  if (o.batch_size != "auto") {
    r.batch_size = parse_int(o.batch_size, "--batch-size");
    if (r.batch_size <= 0) throw UsageError("--batch-size: must be a positive number or auto");
  }
  r.amp = parse_amp(o.amp);
  r.device = resolve_device(o.device);
  if (r.amp != Amp::kNone && !r.device.is_cuda()) throw UsageError("--amp: needs a CUDA device; on CPU use --amp none");
  if (o.threads < 0) throw UsageError("--threads: must be 0 (one per core) or more");
  r.threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  r.storage.dtype = parse_storage_dtype(o.dtype);
  r.storage.compression = Compression::parse(o.compression);
  if (!o.levels.empty()) r.level_request = split_list(o.levels, "--levels");
  if (o.commit_seconds <= 0) throw UsageError("--commit-seconds: must be positive");
  if (o.segment_mb <= 0) throw UsageError("--segment-mb: must be positive");
  r.policy.segment_seconds = o.commit_seconds;
  r.policy.segment_bytes = o.segment_mb << 20;
  r.policy.fsync = o.fsync;
  r.policy.drop_behind = o.drop_behind;
  if (o.stage_priority != "idle" && o.stage_priority != "normal" && o.stage_priority != "auto") {
    throw UsageError("--stage-priority: expected auto, idle or normal, got \"" + o.stage_priority + "\"");
  }
  r.stage_priority = o.stage_priority;
  return r;
}

struct RawWindow {
  std::size_t index = 0;
  WindowData data;
};

struct CropItem {
  CropKey key;
  std::string split;
  std::uint64_t hash = 0;
  at::Tensor input;  // float32 [C, h, w], normalised
  bool input_nonfinite = false;  // NaN/Inf float pixels (nodata written as NaN)
  std::int64_t label_class = 0;
  at::Tensor label_value;
  at::Tensor mask;
  at::Tensor pixel_value;
};

struct EncodedBatch {
  std::vector<CropItem> items;
  std::vector<at::Tensor> levels;  // selected levels, on the encoder's device
};

std::uint64_t combine(std::uint64_t h, std::uint64_t v) {
  return h ^ (v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2));
}

// The content hash stored per row: the crop's input pixels and its labels, so that changed pixels
// or corrected labels both cause a recompute.
std::uint64_t content_hash(const CropPixels& crop, const WindowData& window, const LabelKinds& kinds) {
  std::uint64_t h = pixel_hash(crop.pixels.data_ptr(), crop.pixels.nbytes());
  if (crop.mask.defined()) h = combine(h, pixel_hash(crop.mask.data_ptr(), crop.mask.nbytes()));
  if (crop.pixel_value.defined()) h = combine(h, pixel_hash(crop.pixel_value.data_ptr(), crop.pixel_value.nbytes()));
  if (kinds.has_class) h = combine(h, pixel_hash(&window.label_class, sizeof window.label_class));
  if (kinds.has_value) {
    h = combine(h, pixel_hash(window.label_value.data_ptr(), window.label_value.nbytes()));
  }
  return h;
}

// One pass over the stored bytes of every level, row by row while the row is in cache: the
// NaN/Inf check (unless allowed), and each row's checksum, computed here so the I/O thread (the
// bottleneck of fast encoders) only combines them into its chunks' checksums. Returns the level
// and row of the first NaN/Inf, if any.
struct NonfiniteAt {
  std::size_t level;
  std::int64_t row;
};
std::optional<NonfiniteAt> scan_rows(RowBatch& rows, const StorageOptions& storage, bool check_finite) {
  const std::int64_t n = rows.levels.empty() ? 0 : rows.levels.front().size(0);
  if (n == 0) return std::nullopt;
  const std::size_t elem = element_size(storage.dtype);
  const bool sums = storage.own_checksums();
  for (std::size_t k = 0; k < rows.levels.size(); ++k) {
    const at::Tensor& t = rows.levels[k];
    const std::size_t row_values = std::size_t(t.numel() / n);
    const std::size_t row_bytes = row_values * elem;
    const auto* data = static_cast<const std::uint8_t*>(t.data_ptr());
    std::vector<std::uint32_t> row_sums;
    if (sums) row_sums.reserve(std::size_t(n));
    for (std::int64_t row = 0; row < n; ++row) {
      const std::uint8_t* at = data + std::size_t(row) * row_bytes;
      if (check_finite && !all_finite(at, row_values, storage.dtype)) return NonfiniteAt{k, row};
      if (sums) row_sums.push_back(fletcher32(at, row_bytes));
    }
    if (sums) rows.row_checksums.push_back(std::move(row_sums));
  }
  return std::nullopt;
}

// The shared state of one run: the first error wins and closes every queue.
class RunContext {
 public:
  void on_failure(std::function<void()> closer) { closers_.push_back(std::move(closer)); }
  void fail(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = error;
    }
    failed_ = true;
    for (auto& close : closers_) close();
  }
  bool failed() const { return failed_.load(); }
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  void set_levels(std::vector<LevelSpec> levels) {
    std::lock_guard<std::mutex> lock(mutex_);
    levels_ = std::move(levels);
  }
  std::vector<LevelSpec> levels() {
    std::lock_guard<std::mutex> lock(mutex_);
    return levels_;
  }

 private:
  std::mutex mutex_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
  std::vector<std::function<void()>> closers_;
  std::vector<LevelSpec> levels_;
};

template <typename Body>
std::thread stage(RunContext& ctx, Body body) {
  return std::thread([&ctx, body]() mutable {
    try {
      body();
    } catch (...) {
      ctx.fail(std::current_exception());
    }
  });
}

std::vector<std::size_t> select_levels(const EncoderOutput& out,
                                       const std::vector<std::string>& request) {
  std::vector<std::size_t> selected;
  if (request.empty()) {
    for (std::size_t i = 0; i < out.names.size(); ++i) selected.push_back(i);
    return selected;
  }
  std::string available;
  for (const auto& n : out.names) available += (available.empty() ? "" : ",") + n;
  for (const auto& want : request) {
    auto it = std::find(out.names.begin(), out.names.end(), want);
    std::size_t index = std::size_t(it - out.names.begin());
    if (it == out.names.end()) {
      char* end = nullptr;
      const long v = std::strtol(want.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || std::size_t(v) >= out.names.size()) {
        throw UsageError("--levels: the encoder has no level \"" + want + "\"; it returns " +
                         std::to_string(out.names.size()) + " levels: " + available);
      }
      index = std::size_t(v);
    }
    if (std::find(selected.begin(), selected.end(), index) != selected.end()) {
      throw UsageError("--levels: level \"" + want + "\" is listed twice");
    }
    selected.push_back(index);
  }
  return selected;
}

at::Tensor stack_inputs(const std::vector<CropItem>& items, std::size_t begin, std::size_t end) {
  std::vector<at::Tensor> inputs;
  inputs.reserve(end - begin);
  for (std::size_t i = begin; i < end; ++i) inputs.push_back(items[i].input);
  return at::stack(inputs);
}

void sync_device(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

}  // namespace

nlohmann::json PrecomputeSummary::to_json() const {
  nlohmann::json j;
  j["windows"] = windows;
  j["windows_skipped"] = windows_skipped;
  j["stage_priority"] = stage_priority;
  j["crops_total"] = crops_total;
  j["crops_computed"] = crops_computed;
  j["crops_skipped"] = crops_skipped;
  j["crops_stale"] = crops_stale;
  j["seconds"] = seconds;
  j["encoder_seconds"] = encoder_seconds;
  j["encoder_calls"] = encoder_calls;
  j["crops_per_second"] = seconds > 0 ? double(crops_computed) / seconds : 0.0;
  j["bytes_written"] = bytes_written;
  j["mb_per_second"] = seconds > 0 ? double(bytes_written) / 1e6 / seconds : 0.0;
  j["cache_bytes"] = cache_bytes;
  j["batch_size"] = batch_size;
  j["batch_size_trials"] = batch_size_trials;
  j["device"] = device;
  j["threads"] = threads;
  j["feature_bytes_per_encoder_second"] = encoder_seconds > 0 ? double(bytes_written) / encoder_seconds : 0.0;
  j["stage_seconds"] = {{"read", read_time.wall},       {"prep", prep_time.wall},
                        {"encode", encoder_seconds},    {"convert", convert_time.wall},
                        {"write", write_time.wall},     {"consolidate", consolidate_seconds}};
  // The encoder's CPU time is spread over its intra-op threads, so it is not listed here.
  j["stage_cpu_seconds"] = {{"read", read_time.cpu},
                            {"prep", prep_time.cpu},
                            {"convert", convert_time.cpu},
                            {"write", write_time.cpu}};
  j["seconds_before_first_encoder_call"] = seconds_before_first_encoder_call;
  j["seconds_after_last_encoder_call"] = seconds_after_last_encoder_call;
  j["superseded_rows"] = superseded_rows;
  j["rows_copied_at_end"] = rows_copied_at_end;
  j["recovered_rows"] = recovered_rows;
  if (encoder_only_seconds >= 0) {
    j["encoder_only_seconds"] = encoder_only_seconds;
    j["encoder_only_first_calls_seconds"] = encoder_only_first_calls_seconds;
  }
  j["interrupted"] = interrupted;
  return j;
}

std::string PrecomputeSummary::one_line() const {
  char counts[256];
  std::snprintf(counts, sizeof counts,
                "precompute%s: %lld crop%s (%lld computed, %lld cached, %lld stale) from %lld window%s in %.2fs",
                interrupted ? " INTERRUPTED" : "", (long long)crops_total, crops_total == 1 ? "" : "s",
                (long long)crops_computed, (long long)crops_skipped, (long long)crops_stale, (long long)windows,
                windows == 1 ? "" : "s", seconds);
  std::string line = counts;
  if (crops_computed > 0) {
    char rate[64];
    std::snprintf(rate, sizeof rate, ", %.1f crops/s", seconds > 0 ? double(crops_computed) / seconds : 0.0);
    line += rate;
  }
  line += ", " + format_bytes(double(bytes_written)) + " written, ";
  line += crops_computed > 0 ? "batch " + std::to_string(batch_size) : std::string("nothing to encode");
  line += " on " + device;
  if (device == "cpu") line += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  for (const auto& [why, n] : windows_skipped) {
    line += "; " + std::to_string(n) + (n == 1 ? " window" : " windows") + " skipped (" + why + ")";
  }
  return line;
}

// The dataset reader --format asks for (auto: rslearn when DATASET/windows exists).
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
  throw UsageError("--crop-size: " + dataset + " has windows of different sizes (" + first.group + "/" + first.name +
                   " is " + size(first) + ", " + other->group + "/" + other->name + " is " + size(*other) +
                   "); without --crop-size a crop is a whole window and a cache holds crops of one size: give "
                   "--crop-size (the smallest window is " + size(*smallest) + ")");
}

std::unique_ptr<WindowSource> open_source(const PrecomputeOptions& o) {
  if (o.format != "auto" && o.format != "array" && o.format != "rslearn") {
    throw UsageError("--format: expected auto, array or rslearn, got \"" + o.format + "\"");
  }
  const bool rslearn = o.format == "rslearn" || (o.format == "auto" && is_rslearn_root(o.dataset));
  if (!rslearn) {
    const std::pair<const char*, const std::string*> rslearn_only[] = {
        {"--layers", &o.layers}, {"--groups", &o.groups}, {"--window-names", &o.window_names},
        {"--tags", &o.tags}, {"--label-layer", &o.label_layer}};
    for (const auto& [name, value] : rslearn_only) {
      if (!value->empty()) throw UsageError(std::string(name) + " applies to rslearn datasets; " + o.dataset + " is an array dataset");
    }
    return open_array_dataset(o.dataset);
  }
  RslearnOptions r;
  r.root = o.dataset;
  r.layers = o.layers;
  r.groups = o.groups;
  r.window_names = o.window_names;
  r.tags = o.tags;
  r.split_key = o.split_key;
  r.label_layer = o.label_layer;
  r.label_property = o.label_property;
  r.label_type = o.label_type;
  r.classes = o.classes;
  r.pad_value = o.pad_value;
  r.reader_threads = o.reader_threads;
  return open_rslearn_dataset(r);
}

void check_precompute_options(const PrecomputeOptions& options) { resolve(options); }

PrecomputeEstimate estimate_precompute(const PrecomputeOptions& options) {
  const Resolved opt = resolve(options);
  std::unique_ptr<WindowSource> source = open_source(options);
  check_whole_windows(*source, opt.grid, options.dataset);
  PrecomputeEstimate estimate;
  const auto& windows = source->windows();
  estimate.windows = std::int64_t(windows.size());
  for (const auto& w : windows) estimate.crops += std::int64_t(crop_grid(w.bounds, opt.grid).size());
  if (windows.empty()) return estimate;
  const std::int64_t channels = opt.cropper.bands.empty() ? source->channels() : std::int64_t(opt.cropper.bands.size());
  const std::int64_t h = opt.grid.height.value_or(windows.front().bounds.height());
  const std::int64_t w = opt.grid.width.value_or(windows.front().bounds.width());
  Encoder encoder(options.encoder, c10::Device(c10::kCPU), Amp::kNone);
  const EncoderOutput out = encoder.forward(at::zeros({1, channels, h, w}));
  for (auto i : select_levels(out, opt.level_request)) {
    const at::Tensor& level = out.levels[i];
    estimate.bytes_per_crop += level.numel() * std::int64_t(element_size(opt.storage.dtype));
    std::string shape;
    for (std::int64_t d = 1; d < level.dim(); ++d) shape += (d > 1 ? ", " : "") + std::to_string(level.size(d));
    estimate.levels.push_back(out.names[i] + " [" + shape + "]");
  }
  return estimate;
}

PrecomputeSummary run_precompute(const PrecomputeOptions& options, const PrecomputeHooks& hooks) {
  const auto started = Clock::now();
  const EncoderAllocatorScope allocator;
  const Resolved opt = resolve(options);
  std::unique_ptr<WindowSource> source = open_source(options);
  check_whole_windows(*source, opt.grid, options.dataset);
  const std::int64_t channels = source->channels();
  for (std::int64_t band : opt.cropper.bands) {
    if (band < 0 || band >= channels) {
      throw UsageError("--bands: band " + std::to_string(band) + " is out of range; " +
                       options.dataset + " has " + std::to_string(channels) + " channels (0-" +
                       std::to_string(channels - 1) + ")");
    }
  }
  const std::int64_t input_channels =
      opt.cropper.bands.empty() ? channels : std::int64_t(opt.cropper.bands.size());
  opt.preprocess.validate(input_channels);
  const LabelKinds labels = source->label_kinds();
  CropperOptions cropper = opt.cropper;
  cropper.mask_pad_value = labels.ignore_index;

  // Hashing the encoder file and loading it both read the whole file: the hash runs beside the
  // load (real encoders are hundreds of MB). A load error is reported first, as before.
  std::future<std::string> encoder_sha256 = std::async(std::launch::async, sha256_file_hex, options.encoder);
  Encoder encoder(options.encoder, opt.device, opt.amp);
  Signature signature;
  signature["format"] = kCacheFormatVersion;
  signature["encoder_sha256"] = encoder_sha256.get();
  signature["encoder_path"] = std::filesystem::absolute(options.encoder).string();
  signature["dataset_path"] = std::filesystem::absolute(options.dataset).string();
  signature["preprocessing"] = {{"scale", opt.preprocess.scale},
                                {"mean", opt.preprocess.mean},
                                {"std", opt.preprocess.std}};
  signature["bands"] = opt.cropper.bands;
  signature["crop_size"] = opt.grid.width ? nlohmann::json({*opt.grid.width, *opt.grid.height})
                                          : nlohmann::json(nullptr);
  signature["overlap"] = opt.grid.overlap;
  signature["pad_value"] = opt.cropper.pad_value;
  signature["levels_requested"] = opt.level_request.empty() ? nlohmann::json("all")
                                                            : nlohmann::json(opt.level_request);
  signature["dtype"] = to_string(opt.storage.dtype);
  signature["labels"] = label_kinds_to_json(labels);
  signature["embcache_version"] = EMBCACHE_VERSION;
  const nlohmann::json source_fields = source->signature_fields();
  for (const auto& [k, v] : source_fields.items()) signature[k] = v;

  CacheStore store(options.out, signature, labels, opt.storage, opt.policy, options.overwrite);
  if (!options.quiet && store.cache_exists() &&
      store.storage().compression.to_string() != opt.storage.compression.to_string() &&
      options.compression != "none") {
    std::fprintf(stderr, "embcache: note: %s keeps its compression %s (--overwrite to change it)\n",
                 options.out.c_str(), store.storage().compression.to_string().c_str());
  }

  const auto& windows = source->windows();
  PrecomputeSummary summary;
  summary.windows = std::int64_t(windows.size());
  for (const auto& [why, n] : source->skipped()) summary.windows_skipped[why] = n;
  for (const auto& w : windows) summary.crops_total += std::int64_t(crop_grid(w.bounds, opt.grid).size());
  summary.device = opt.device.str();
  store.expect_rows(summary.crops_total);

  const std::int64_t max_batch = opt.batch_size > 0 ? opt.batch_size : (opt.device.is_cuda() ? 256 : 64);
  BoundedQueue<RawWindow> raw_queue(2);
  BoundedQueue<CropItem> crop_queue(std::size_t(2 * max_batch));
  BoundedQueue<EncodedBatch> encoded_queue(2);
  BoundedQueue<RowBatch> row_queue(2);
  RunContext ctx;
  StagePriority priority(opt.stage_priority);
  ctx.on_failure([&] {
    raw_queue.close();
    crop_queue.close();
    encoded_queue.close();
    row_queue.close();
  });
  std::mutex io_mutex;
  std::condition_variable io_wake;
  auto wake_io = [&] {
    { std::lock_guard<std::mutex> lock(io_mutex); }
    io_wake.notify_all();
  };
  raw_queue.set_listener(wake_io);
  row_queue.set_listener(wake_io);

  std::atomic<std::int64_t> skipped{0}, stale{0}, written{0}, computed_bytes{0};
  std::atomic<bool> io_failed{false}, io_done{false};
  StageTime read_time, write_time, prep_time, convert_time;
  double encode_seconds = 0;
  std::optional<Clock::time_point> first_call_start, last_call_end;  // written by the encode stage only
  std::int64_t encoder_calls = 0, chosen_batch = opt.batch_size;
  nlohmann::json trials = nlohmann::json::array();
  std::vector<std::int64_t> input_shape;
  Progress progress("precompute", summary.crops_total,
                    options.quiet ? Progress::Mode::kQuiet : Progress::Mode::kAuto);

  // Stage 1 (the only HDF5 thread): read windows, write finished rows. Reading comes first: the
  // encoder waits for the next windows, while finished rows can wait in their bounded queue. A
  // large batch is written chunk by chunk with reads in between, so the next windows never wait
  // for a whole batch's write.
  std::thread io_thread = stage(ctx, [&] {
    bool normal_now = true;  // threads start at normal scheduling
    priority.follow(normal_now);
    h5::silence_errors_on_this_thread();
    std::size_t next = 0;
    bool reading_done = false;
    bool levels_set = false;
    std::exception_ptr read_error;  // a read that failed between two chunks of a batch
    auto read_ahead = [&] {         // reads windows while the raw queue has room
      while (!reading_done && !read_error) {
        if (stop_requested() || next >= windows.size()) {
          raw_queue.close();
          reading_done = true;
          return;
        }
        if (!raw_queue.has_space()) return;
        const StageStopwatch watch;
        RawWindow raw{next, source->read(next)};
        watch.add_to(read_time);
        ++next;
        raw_queue.push(std::move(raw));
      }
    };
    // Between two chunks the batch is half written: a read error waits until it is complete.
    auto read_between_chunks = [&] {
      try {
        read_ahead();
      } catch (...) {
        read_error = std::current_exception();
      }
    };
    while (!ctx.failed()) {
      priority.follow(normal_now);
      read_ahead();
      if (auto rows = row_queue.try_pop()) {
        const StageStopwatch watch;
        const StageTime read_before = read_time;  // reads between chunks are read time
        try {
          if (!levels_set) {
            store.set_levels(ctx.levels());
            levels_set = true;
          }
          store.append(*rows, read_between_chunks);
        } catch (...) {
          io_failed = true;
          throw;
        }
        StageTime batch_time;
        watch.add_to(batch_time);
        write_time.wall += batch_time.wall - (read_time.wall - read_before.wall);
        write_time.cpu += batch_time.cpu - (read_time.cpu - read_before.cpu);
        written += std::int64_t(rows->size());
        progress.update(written + skipped);
        if (read_error) std::rethrow_exception(read_error);
        continue;
      }
      if (row_queue.drained()) {
        io_done = true;
        break;
      }
      progress.update(written + skipped);
      std::unique_lock<std::mutex> lock(io_mutex);
      io_wake.wait_for(lock, std::chrono::milliseconds(100), [&] {
        return ctx.failed() || row_queue.has_items() || row_queue.drained() ||
               (!reading_done && (raw_queue.has_space() || stop_requested()));
      });
    }
  });

  // Stage 2: crop, hash, skip what is cached, normalise.
  std::thread prep_thread = stage(ctx, [&] {
    bool normal_now = true;  // threads start at normal scheduling
    priority.follow(normal_now);
    const auto& committed = store.committed();
    while (auto raw = raw_queue.pop()) {
      priority.follow(normal_now);
      StageStopwatch watch;
      const WindowInfo& info = windows[raw->index];
      for (const Bounds& bounds : crop_grid(info.bounds, opt.grid)) {
        CropPixels crop = cut_crop(raw->data.pixels, raw->data.mask, info.bounds, bounds, cropper, raw->data.pixel_value);
        CropItem item;
        item.key = CropKey{info.group, info.name, bounds};
        item.hash = content_hash(crop, raw->data, labels);
        const auto found = committed.find(item.key.map_key());
        if (found != committed.end()) {
          if (found->second == item.hash) {
            ++skipped;
            continue;
          }
          ++stale;
        }
        item.split = info.split;
        item.input = opt.preprocess.apply(crop.pixels);
        // Noted for the error message: NaN features from NaN pixels need the dataset fixed. Only
        // float pixels can hold NaN/Inf, so integer datasets skip the pass.
        if (!options.allow_nonfinite && crop.pixels.is_floating_point()) {
          item.input_nonfinite = !at::isfinite(item.input).all().item<bool>();
        }
        item.label_class = raw->data.label_class;
        item.label_value = raw->data.label_value;
        item.mask = crop.mask;
        item.pixel_value = crop.pixel_value;
        watch.add_to(prep_time);
        if (!crop_queue.push(std::move(item))) return;
        watch.restart();  // time blocked in push is not busy time
      }
      watch.add_to(prep_time);
    }
    crop_queue.close();
  });

  // Stage 3: batch and encode.
  std::thread encode_thread = stage(ctx, [&] {
    // Only this thread sets the intra-op thread count: in LibTorch it is partly process-wide, and
    // a second setter would race it (features differ in the last bit between thread counts).
    at::set_num_threads(opt.threads);
    std::vector<std::size_t> selected;
    std::vector<LevelSpec> specs;
    double last_call_seconds = 0;
    // Waits (for crops, or for room to hand over features) leave the cores to the stages: on a
    // CPU the OpenMP workers sleep instead of spinning (core_sharing.hpp). Entering that region
    // costs ~0.07 ms, so it is skipped where the queue already allows going on.
    auto wait_cores_free = [&](const std::function<void()>& wait) {
      if (opt.device.is_cuda()) {
        wait();
      } else {
        wait_with_openmp_workers_asleep(opt.threads, wait);
      }
    };
    auto run = [&](const at::Tensor& batch) {
      const auto t0 = Clock::now();
      if (!first_call_start) first_call_start = t0;
      EncoderOutput out = encoder.forward(batch);
      sync_device(opt.device);
      last_call_end = Clock::now();
      last_call_seconds = std::chrono::duration<double>(*last_call_end - t0).count();
      encode_seconds += last_call_seconds;
      ++encoder_calls;
      if (hooks.on_encoder_call) hooks.on_encoder_call(batch.size(0));
      return out;
    };
    std::size_t batch = 0;  // fixed once chosen
    auto emit = [&](std::vector<CropItem> items) {
      at::Tensor inputs = stack_inputs(items, 0, items.size());
      const std::int64_t n = inputs.size(0);
      // A short last batch is padded to the full size and cut back: every call has one shape,
      // so a crop's features never depend on where batch boundaries fell (reruns after a crash
      // give bit-identical features).
      if (batch > 0 && std::size_t(n) < batch) {
        inputs = at::cat({inputs, at::zeros({std::int64_t(batch) - n, inputs.size(1), inputs.size(2), inputs.size(3)})});
      }
      EncoderOutput out = run(inputs);
      if (inputs.size(0) != n) {
        for (auto& level : out.levels) level = level.slice(0, 0, n);
      }
      if (specs.empty()) {
        input_shape.assign(items.front().input.sizes().begin(), items.front().input.sizes().end());
        selected = select_levels(out, opt.level_request);
        const std::int64_t h = items.front().input.size(1);
        for (std::size_t i : selected) {
          const at::Tensor& t = out.levels[i];
          LevelSpec spec;
          spec.name = out.names[i];
          spec.index = std::int64_t(i);
          spec.row_shape.assign(t.sizes().begin() + 1, t.sizes().end());
          spec.stride = t.dim() == 4 && t.size(2) > 0 ? h / t.size(2) : 0;
          specs.push_back(spec);
        }
        ctx.set_levels(specs);
      }
      EncodedBatch encoded;
      for (std::size_t k = 0; k < selected.size(); ++k) {
        const at::Tensor& t = out.levels[selected[k]];
        if (std::vector<std::int64_t>(t.sizes().begin() + 1, t.sizes().end()) != specs[k].row_shape) {
          throw InputError("encoder level " + specs[k].name + " changed shape between batches: " +
                           specs[k].shape_text() + " then " + std::string(c10::str(t.sizes().slice(1))) +
                           "; every crop must give the same feature shape");
        }
        encoded.levels.push_back(t);
      }
      // Light or heavy, judged on the stored batches (the batch-size trials are not).
      std::int64_t feature_bytes = 0;
      for (const auto& t : encoded.levels) feature_bytes += t.numel() * std::int64_t(element_size(opt.storage.dtype));
      priority.observe(double(feature_bytes), last_call_seconds);
      for (auto& item : items) item.input = at::Tensor();  // free inputs early
      encoded.items = std::move(items);
      if (!encoded_queue.has_space()) wait_cores_free([&] { encoded_queue.wait_for_space(); });
      return encoded_queue.push(std::move(encoded));
    };
    std::vector<CropItem> pending;
    if (opt.batch_size == 0) {
      // --batch-size auto: time candidate sizes on the first crops, keep the fastest per sample.
      const std::vector<std::int64_t> candidates = opt.device.is_cuda()
                                                       ? std::vector<std::int64_t>{16, 32, 64, 128, 256}
                                                       : std::vector<std::int64_t>{4, 8, 16, 32, 64};
      while (std::int64_t(pending.size()) < candidates.back()) {
        auto item = crop_queue.pop();
        if (!item) break;
        pending.push_back(std::move(*item));
      }
      std::vector<std::int64_t> usable;
      for (auto c : candidates) {
        if (c <= std::int64_t(pending.size())) usable.push_back(c);
      }
      if (usable.size() >= 2) {
        BatchSizeSearch search;
        for (auto c : usable) {
          // Best of two: the first call at a new shape pays allocation and kernel selection.
          const at::Tensor inputs = stack_inputs(pending, 0, std::size_t(c));
          double fastest = 1e30;
          for (int repeat = 0; repeat < 2; ++repeat) {
            const auto t0 = Clock::now();
            run(inputs);
            fastest = std::min(fastest, seconds_since(t0));
          }
          const double rate = double(c) / std::max(fastest, 1e-9);
          trials.push_back({{"batch_size", c}, {"crops_per_second", rate}});
          // On a short run the trials of sizes that lose were 10% of the wall time.
          if (!search.record(c, rate)) break;
        }
        chosen_batch = search.chosen();
      } else {
        chosen_batch = std::int64_t(pending.size());
      }
    }
    batch = std::size_t(std::max<std::int64_t>(chosen_batch, 1));
    while (true) {
      while (pending.size() >= batch) {
        std::vector<CropItem> items(std::make_move_iterator(pending.begin()),
                                    std::make_move_iterator(pending.begin() + std::ptrdiff_t(batch)));
        pending.erase(pending.begin(), pending.begin() + std::ptrdiff_t(batch));
        if (!emit(std::move(items))) return;
        if (pending.size() < batch && !crop_queue.items_ready(batch - pending.size())) {
          wait_cores_free([&] { crop_queue.wait_for_items(batch - pending.size()); });
        }
      }
      auto item = crop_queue.pop();
      if (!item) break;
      pending.push_back(std::move(*item));
    }
    if (!pending.empty() && !ctx.failed()) emit(std::move(pending));
    encoded_queue.close();
  });

  // Stage 4: check, convert to the storage dtype (by torch, never HDF5), gather labels.
  std::thread convert_thread = stage(ctx, [&] {
    bool normal_now = true;  // threads start at normal scheduling
    priority.follow(normal_now);
    const at::ScalarType target = torch_type(opt.storage.dtype);
    std::vector<LevelSpec> specs;
    while (auto encoded = encoded_queue.pop()) {
      priority.follow(normal_now);
      const StageStopwatch watch;
      if (specs.empty()) specs = ctx.levels();
      RowBatch rows;
      for (std::size_t k = 0; k < encoded->levels.size(); ++k) {
        // By torch, never by HDF5; values too large for a 16-bit dtype become Inf here.
        const at::Tensor stored = encoded->levels[k].to(target);
        rows.levels.push_back(stored.to(at::kCPU).contiguous());
        computed_bytes += std::int64_t(rows.levels.back().nbytes());
      }
      if (const auto bad = scan_rows(rows, opt.storage, !options.allow_nonfinite)) {
        const CropItem& item = encoded->items[std::size_t(bad->row)];
        if (item.input_nonfinite) {
          throw InputError("crop " + item.key.describe() + " has NaN/Inf input pixels (after preprocessing), so level " +
                           specs[bad->level].name + " has NaN/Inf features; fill them in the dataset (for rslearn "
                           "rasters, declare the nodata value), or pass --allow-nonfinite to store them");
        }
        throw InputError("level " + specs[bad->level].name + " of crop " + item.key.describe() +
                         " has NaN/Inf features (or values too large for " + to_string(opt.storage.dtype) +
                         "); fix the encoder or input, or pass --allow-nonfinite to store them");
      }
      std::vector<std::int64_t> classes;
      std::vector<at::Tensor> values, masks, pixel_values;
      for (auto& item : encoded->items) {
        rows.groups.push_back(item.key.group);
        rows.windows.push_back(item.key.window);
        rows.splits.push_back(item.split);
        for (auto v : item.key.bounds.as_array()) rows.bounds.push_back(v);
        rows.pixel_hashes.push_back(item.hash);
        if (labels.has_class) classes.push_back(item.label_class);
        if (labels.has_value) values.push_back(item.label_value);
        if (labels.has_mask) masks.push_back(item.mask);
        if (labels.has_pixel_value) pixel_values.push_back(item.pixel_value);
      }
      if (labels.has_class) rows.label_class = at::tensor(classes, at::kLong);
      if (labels.has_value) rows.label_value = at::stack(values).contiguous();
      if (labels.has_mask) rows.label_mask = at::stack(masks).contiguous();
      if (labels.has_pixel_value) rows.label_pixel_value = at::stack(pixel_values).contiguous();
      watch.add_to(convert_time);
      if (!row_queue.push(std::move(rows))) return;
    }
    row_queue.close();
  });

  // This thread only waits. A light encoder's stages run at normal scheduling, and then the
  // encoder's OpenMP workers must not spin on their cores (core_sharing.hpp).
  std::optional<OpenMpSpinThrottle> throttle;
  if (priority.wait_decided([&] { return io_done.load() || ctx.failed(); }) && !opt.device.is_cuda()) {
    throttle.emplace(opt.threads);
  }
  io_thread.join();
  prep_thread.join();
  encode_thread.join();
  convert_thread.join();
  progress.finish();

  if (auto error = ctx.error()) {
    // Rows appended so far are complete unless writing them failed: then only what was committed
    // before stays (the next run recovers it).
    if (io_failed) {
      store.abandon();
    } else {
      try {
        store.commit();
      } catch (...) {
      }
      store.abandon();
    }
    std::rethrow_exception(error);
  }
  // No commit first: closing and renaming the file being built installs every row at once.
  const ConsolidateStats consolidated = store.consolidate(/*complete=*/!stop_requested());

  summary.crops_skipped = skipped;
  summary.stage_priority = priority.decision();
  summary.crops_stale = stale;
  summary.crops_computed = written;
  summary.bytes_written = computed_bytes;
  summary.encoder_seconds = encode_seconds;
  summary.encoder_calls = encoder_calls;
  summary.batch_size = chosen_batch;
  summary.threads = opt.threads;
  summary.batch_size_trials = trials;
  summary.read_time = read_time;
  summary.prep_time = prep_time;
  summary.convert_time = convert_time;
  summary.write_time = write_time;
  summary.consolidate_seconds = consolidated.seconds;
  summary.superseded_rows = consolidated.superseded_rows;
  summary.rows_copied_at_end = consolidated.copied_rows;
  summary.recovered_rows = store.recovered_rows();
  summary.interrupted = stop_requested();
  if (std::filesystem::exists(options.out)) {
    summary.cache_bytes = std::int64_t(std::filesystem::file_size(options.out));
  }
  summary.seconds = seconds_since(started);
  if (first_call_start && last_call_end) {
    summary.seconds_before_first_encoder_call = std::chrono::duration<double>(*first_call_start - started).count();
    summary.seconds_after_last_encoder_call = seconds_since(*last_call_end);
  }

  if (hooks.measure_encoder_only && summary.crops_computed > 0 && !input_shape.empty()) {
    // The same number of batches of the same shape through the encoder alone, with no I/O. A
    // freshly loaded copy: its first calls pay the warm-up (TorchScript profiling and
    // optimisation, allocations) that the pipeline's encoder paid inside the wall time.
    Encoder alone(options.encoder, opt.device, opt.amp);
    at::set_num_threads(opt.threads);
    std::vector<std::int64_t> shape{chosen_batch};
    shape.insert(shape.end(), input_shape.begin(), input_shape.end());
    const at::Tensor batch = at::randn(shape);
    const std::int64_t batches = (summary.crops_computed + chosen_batch - 1) / chosen_batch;
    summary.encoder_only_seconds = 0;
    for (std::int64_t i = 0; i < batches; ++i) {
      const auto t0 = Clock::now();
      alone.forward(batch);
      sync_device(opt.device);
      const double seconds = seconds_since(t0);
      summary.encoder_only_seconds += seconds;
      if (i < 2) summary.encoder_only_first_calls_seconds += seconds;
    }
  }
  return summary;
}

}  // namespace embcache
