#include "embcache/pipeline/precompute.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "embcache/host/intra_op_threads.hpp"
#include "embcache/core/file_hash_memo.hpp"
#include "embcache/core/stop_request.hpp"
#include "embcache/host/thread_name.hpp"
#include "embcache/dataset/window_source.hpp"
#include "embcache/host/allocator_scope.hpp"
#include "embcache/pipeline/convert_stage.hpp"
#include "embcache/pipeline/encode_stage.hpp"
#include "embcache/pipeline/io_stage.hpp"
#include "embcache/pipeline/prep_stage.hpp"

namespace embcache {
namespace {

// The queues of one run. Bounded, they hold two batches of crops (of the largest batch the
// encoder may form) as windows (raw_queue_windows) and as crops, and two batches of features and
// of rows; unbounded for the serial executor, where each stage runs to its end before the next
// starts.
struct Queues {
  Queues(std::size_t max_batch, std::size_t max_crops_per_window, bool bounded)
      : raw(bounded ? raw_queue_windows(max_batch, max_crops_per_window) : kUnbounded),
        crops(bounded ? kCropBatches * max_batch : kUnbounded),
        encoded(bounded ? kEncodedBatches : kUnbounded), rows(bounded ? kRowQueueBatches : kUnbounded) {}
  void close_all() {
    raw.close();
    crops.close();
    encoded.close();
    rows.close();
  }
  static constexpr std::size_t kUnbounded = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t kCropBatches = 2, kEncodedBatches = 2;  // queue depths, in batches
  // The most batches of the prep stage's slots alive at once, bounded: the crop queue's batches'
  // worth of crops span one more than that, then the encoder's, the encoded ones and the one the
  // convert stage holds.
  static constexpr std::size_t kBatchesHeld = (kCropBatches + 1) + 1 + kEncodedBatches + 1;
  // The most batches of features alive at once after the encoder's, bounded: the encoded queue's,
  // the convert stage's, the row queue's and the one being written.
  static constexpr std::size_t kFeatureBatchesHeld = kEncodedBatches + 1 + kRowQueueBatches + 1;
  RawQueue raw;
  CropQueue crops;
  EncodedQueue encoded;
  RowQueue rows;
};

// The four stages of one run over its queues.
struct Stages {
  PrepStage prep;  // first: the I/O stage counts its skipped crops in the progress line
  IoStage io;
  EncodeStage encode;
  ConvertStage convert;
};

// The encoder in this thread, reusing its OpenMP team; every other stage in a thread of its own
// that opens no team (without_openmp_team, core_sharing.hpp says why). A light encoder's stages run at
// normal scheduling, and then its OpenMP workers must not spin on their cores: a helper thread
// holds OpenMpSpinThrottle's idle team until the encoder is done.
void run_threaded(Stages& s, RunContext& context, const StagePriority& priority, const PrecomputePlan& plan) {
  // Named, so that `top -H` and perf tell the stages from the encoder's OpenMP workers.
  const auto stage = [&](const auto& name, const std::function<void()>& body) {
    return context.start([&priority, name, body] {
      name_this_thread(name);
      priority.watch_this_thread();
      without_openmp_team(body);
    });
  };
  std::thread io = stage("embcache io", [&] { s.io.run(); });
  std::thread prep = stage("embcache prep", [&] { s.prep.run(); });
  std::thread convert = stage("embcache conv", [&] { s.convert.run(); });
  std::mutex mutex;
  std::condition_variable encoded;
  std::atomic<bool> encoder_done{false};  // set under mutex, for the wait below
  std::thread throttler([&] {
    name_this_thread("embcache spin");
    const auto over = [&] { return encoder_done.load() || context.failed(); };
    if (!priority.wait_decided(over) || plan.device.is_cuda()) return;
    const OpenMpSpinThrottle throttle(plan.threads);
    std::unique_lock<std::mutex> lock(mutex);
    encoded.wait(lock, [&] { return encoder_done.load(); });
  });
  context.run([&] { s.encode.run(); });
  {
    std::lock_guard<std::mutex> lock(mutex);
    encoder_done = true;
  }
  encoded.notify_all();
  throttler.join();
  io.join();
  prep.join();
  convert.join();
}

// The stages one after another in this thread (unbounded queues).
void run_serial(Stages& s, RunContext& context) {
  context.run([&] { s.io.read_all(); });
  if (!context.failed()) context.run([&] { s.prep.run(); });
  if (!context.failed()) context.run([&] { s.encode.run(); });
  if (!context.failed()) context.run([&] { s.convert.run(); });
  if (!context.failed()) context.run([&] { s.io.write_all(); });
}

// The encoder file's hash (computed beside its load: both read the whole file, and real encoders
// are hundreds of MB; or remembered from an earlier run with the same file, FileHashMemo) and the
// cache's signature. A load error is reported before a hash error.
std::unique_ptr<Encoder> load_encoder(const PrecomputePlan& plan, std::string* sha256) {
  std::future<std::string> hash = std::async(std::launch::async, [&plan] {
    return FileHashMemo(plan.encoder_hash_memo).sha256_hex(plan.encoder);
  });
  auto encoder = std::make_unique<Encoder>(plan.encoder, plan.device, plan.amp, encoder_optimization(plan));
  *sha256 = hash.get();
  return encoder;
}

// Under --optimize: how far the optimised encoder is from the plain one, per output, on a batch of
// two crops of the run's input shape with smooth deterministic values in [-1, 1] (the scale of
// normalised inputs). Null when the dataset has no windows.
nlohmann::json measure_optimization(Encoder& encoder, const PrecomputePlan& plan, const WindowSource& source,
                                    std::int64_t channels) {
  if (source.windows().empty()) return nullptr;
  const Bounds& first = source.windows().front().bounds;
  std::vector<std::int64_t> shape{2, channels, plan.grid.height.value_or(first.height()),
                                  plan.grid.width.value_or(first.width())};
  if (source.time_steps() > 0) shape.insert(shape.begin() + 1, source.time_steps());
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  const at::Tensor sample = at::sin(at::arange(n, at::kFloat) * 0.7).reshape(shape);
  const OptimizationDifference difference = encoder.measure_optimization(sample);
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t i = 0; i < difference.names.size(); ++i) j[difference.names[i]] = difference.relative[i];
  return j;
}

// After a failed stage: rows appended so far are complete unless writing them failed; then only
// what was committed before stays (the next run recovers it).
[[noreturn]] void end_failed_run(CacheStore& store, const IoStage& io, std::exception_ptr error) {
  if (!io.failed_writing) {
    try {
      store.commit();
    } catch (...) {
    }
  }
  store.abandon();
  std::rethrow_exception(error);
}

void fill_summary(PrecomputeSummary& summary, const Stages& s, const StagePriority& priority, const PrecomputePlan& plan) {
  summary.crops_skipped = s.prep.skipped;
  summary.crops_stale = s.prep.stale;
  summary.crops_computed = s.io.rows_written;
  summary.stage_priority = priority.decision();
  summary.bytes_written = s.convert.feature_bytes;
  summary.encoder_seconds = s.encode.stats.seconds;
  summary.encoder_calls = s.encode.stats.calls;
  summary.batch_size = s.encode.stats.batch_size;
  summary.batch_size_trials = s.encode.stats.trials;
  summary.input_shape = s.encode.stats.input_shape;
  summary.encoder_waits = s.encode.stats.waits;
  summary.encoder_wait_seconds = s.encode.stats.wait_seconds;
  summary.threads = plan.threads;
  summary.read_time = s.io.read_time;
  summary.prep_time = s.prep.time;
  summary.convert_time = s.convert.time;
  summary.write_time = s.io.write_time;
}

void fill_store_summary(PrecomputeSummary& summary, const CacheStore& store, const ConsolidateStats& consolidated) {
  summary.consolidate_seconds = consolidated.seconds;
  summary.superseded_rows = consolidated.superseded_rows;
  summary.rows_copied_at_end = consolidated.copied_rows;
  summary.recovered_rows = store.recovered_rows();
  summary.chunks_checksummed_on_io_thread = store.chunks_checksummed_while_writing();
  summary.interrupted = stop_requested();
  summary.cache_bytes = consolidated.bytes;
  summary.cache_parts = consolidated.parts;
}

// An existing cache keeps the compression it was made with; says so when another was asked for.
void note_kept_compression(const PrecomputePlan& plan, const CacheStore& store) {
  if (!plan.quiet && store.cache_exists() && plan.storage.compression.kind != Compression::Kind::kNone &&
      store.storage().compression.to_string() != plan.storage.compression.to_string()) {
    std::fprintf(stderr, "embcache: note: %s keeps its compression %s (--overwrite to change it)\n", plan.out.c_str(),
                 store.storage().compression.to_string().c_str());
  }
}

// An encoder whose features vary from call to call breaks what a cache promises (a rerun, a
// resumed run or another shard gives the same rows): said on stderr, --quiet or not, and in the
// summary, before any work.
void warn_of_randomness(const Encoder& encoder, PrecomputeSummary& summary) {
  if (encoder.randomness().empty()) return;
  summary.warnings.push_back(encoder.path() + ": " + encoder.randomness());
  std::fprintf(stderr, "embcache: warning: %s\n", summary.warnings.back().c_str());
}

// --only-new-windows: the same dataset again, without the windows whose every crop is cached
// (they are not read); counts those in summary.windows_not_read.
std::unique_ptr<WindowSource> without_cached_windows(const PrecomputePlan& plan, const CacheStore& store,
                                                     const WindowSource& listed, PrecomputeSummary& summary) {
  const auto& committed = store.committed();
  std::unique_ptr<WindowSource> source = open_window_source(plan, [&](const WindowInfo& w) {
    for (const Bounds& b : crop_grid(w.bounds, plan.grid)) {
      if (!committed.count(CropKey{w.group, w.name, b}.map_key())) return true;
    }
    return false;
  });
  summary.windows_not_read = std::int64_t(listed.windows().size()) - std::int64_t(source->windows().size());
  return source;
}

// The run's windows and crops into the summary; returns the most crops one window has.
std::size_t count_windows(const PrecomputePlan& plan, const WindowSource& source, PrecomputeSummary& summary) {
  summary.windows = std::int64_t(source.windows().size());
  for (const auto& [why, n] : source.skipped()) summary.windows_skipped[why] = n;
  std::size_t max_crops_per_window = 1;
  for (const auto& w : source.windows()) {
    const std::size_t crops = crop_grid(w.bounds, plan.grid).size();
    summary.crops_total += std::int64_t(crops);
    max_crops_per_window = std::max(max_crops_per_window, crops);
  }
  return max_crops_per_window;
}

}  // namespace

PrecomputeSummary run_precompute(const PrecomputePlan& plan, const PrecomputeHooks& hooks) {
  const auto started = Clock::now();
  const EncoderAllocatorScope allocator;
  // The run's thread count from the start (this thread is the encoder's): loading, optimising and
  // the difference check run as the batches will, on every core asked for, not on LibTorch's
  // default (one thread per physical core, which can be fewer).
  use_intra_op_threads(plan.threads);
  std::unique_ptr<WindowSource> source = open_window_source(plan);
  const std::int64_t channels = check_window_source(plan, *source);
  const LabelKinds labels = source->label_kinds();
  std::string encoder_sha256;
  const std::unique_ptr<Encoder> encoder = load_encoder(plan, &encoder_sha256);
  const nlohmann::json optimize_difference =
      encoder->optimized() ? measure_optimization(*encoder, plan, *source, channels) : nlohmann::json(nullptr);
  CacheStore store(plan.out,
                   precompute_signature(plan, encoder_sha256, labels, source->signature_fields(), encoder->optimized(),
                                        optimize_difference),
                   labels,
                   plan.storage, plan.policy, plan.overwrite, plan.shard.text());
  note_kept_compression(plan, store);

  PrecomputeSummary summary;
  if (plan.only_new_windows && store.cache_exists()) source = without_cached_windows(plan, store, *source, summary);
  const auto& windows = source->windows();
  const std::size_t max_crops_per_window = count_windows(plan, *source, summary);
  summary.device = plan.device.str();
  summary.encoder_optimized = encoder->optimized();
  warn_of_randomness(*encoder, summary);
  store.expect_rows(summary.crops_total);

  Queues queues(std::size_t(plan.max_batch()), max_crops_per_window, !hooks.serial);
  RunContext context;
  context.on_failure([&] { queues.close_all(); });
  // The serial executor runs in the caller's thread, whose scheduling it must not change.
  StagePriority priority(hooks.serial ? StageScheduling::kNormal : plan.stage_scheduling,
                         !plan.device.is_cuda() && encoder_leaves_cores_free(plan.threads));
  Progress progress("precompute", summary.crops_total, plan.quiet ? Progress::Mode::kQuiet : Progress::Mode::kAuto);
  PrepStage::Settings prep{plan.grid, plan.cropper, plan.preprocess, labels, plan.allow_nonfinite, encoder->optimized()};
  prep.cropper.mask_pad_value = labels.ignore_index;
  // Under --batch-size auto every candidate divides the largest, so batches stay aligned to slots.
  prep.batch_slots = plan.max_batch();
  prep.kept_batches = Queues::kBatchesHeld;
  EncodeStage::Settings encode{plan.batch_size, plan.device, plan.threads, plan.level_request, plan.layout, plan.storage.dtype,
                               Queues::kFeatureBatchesHeld, hooks.on_encoder_call, hooks.on_encoder_call_start};
  Stages stages{
      PrepStage(queues.raw, queues.crops, windows, std::move(prep), store.committed(), store.committed_splits(), priority),
      IoStage(*source, queues.raw, queues.rows, store, context, priority, progress, stages.prep.skipped),
      EncodeStage(queues.crops, queues.encoded, *encoder, std::move(encode), priority, context),
      // The rows go into the file being built (uncompressed): checksums for its direct chunk
      // writes are computed here, off the I/O thread, whatever the cache's compression.
      ConvertStage(queues.encoded, queues.rows, store.building_storage(), plan.allow_nonfinite, labels, context, priority)};
  if (hooks.serial) {
    run_serial(stages, context);
  } else {
    run_threaded(stages, context, priority, plan);
  }
  progress.finish();
  if (auto error = context.error()) end_failed_run(store, stages.io, error);

  // No commit first: closing and renaming the file being built installs every row at once.
  const ConsolidateStats consolidated = store.consolidate(/*complete=*/!stop_requested());
  fill_summary(summary, stages, priority, plan);
  fill_store_summary(summary, store, consolidated);
  summary.shard = plan.shard.text();
  summary.seconds = seconds_since(started);
  const EncodeStage::Stats& calls = stages.encode.stats;
  if (calls.first_call_start && calls.last_call_end) {
    summary.seconds_before_first_encoder_call = std::chrono::duration<double>(*calls.first_call_start - started).count();
    summary.seconds_after_last_encoder_call = seconds_since(*calls.last_call_end);
  }
  return summary;
}

}  // namespace embcache
