// `precompute`: windows -> crops -> encoder -> cache, as overlapped stages over bounded queues.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

#include "embcache/core/clock.hpp"
#include "embcache/pipeline/precompute_options.hpp"

namespace embcache {

struct PrecomputeSummary {
  std::int64_t windows = 0;
  std::map<std::string, std::int64_t> windows_skipped;  // reason -> windows the dataset left out
  std::int64_t crops_total = 0;
  std::int64_t crops_computed = 0;
  std::int64_t crops_skipped = 0;  // already cached with identical pixels
  std::int64_t crops_stale = 0;    // cached, but pixels changed: recomputed (counted in computed)
  double seconds = 0.0;
  double encoder_seconds = 0.0;
  std::int64_t encoder_calls = 0;
  std::int64_t bytes_written = 0;  // feature bytes produced by this run
  std::int64_t cache_bytes = 0;    // size of the cache file afterwards
  std::int64_t batch_size = 0;
  nlohmann::json batch_size_trials = nlohmann::json::array();
  std::string device;
  int threads = 0;             // the encoder's intra-op threads
  std::string stage_priority;  // how the non-encoder stages ran: idle or normal
  // Busy time per stage: wall seconds (`stage_seconds`, preemption included) and the stage
  // thread's CPU seconds (`stage_cpu_seconds`).
  StageTime read_time, prep_time, convert_time, write_time;
  double consolidate_seconds = 0;   // closing and installing the cache at the end
  // Where the wall time outside the encoder's calls went: before its first call (loading the
  // encoder, opening the cache, the first batch's reading) and after its last one (the last
  // batches' writing, consolidation). Zero when nothing was encoded.
  double seconds_before_first_encoder_call = 0;
  double seconds_after_last_encoder_call = 0;
  std::int64_t superseded_rows = 0;
  std::int64_t rows_copied_at_end = 0;  // 0 unless compression or stale rows made the end copy rows
  std::int64_t recovered_rows = 0;      // rows an interrupted run had committed, installed first
  double encoder_only_seconds = -1.0;        // set by measure_encoder_only
  double encoder_only_first_calls_seconds = 0;  // of which the first two calls (warm-up)
  bool interrupted = false;
  nlohmann::json to_json() const;
  std::string one_line() const;
};

struct PrecomputeHooks {
  std::function<void(std::int64_t batch)> on_encoder_call;  // tests count encoder calls
  bool measure_encoder_only = false;  // benchmarks: re-time the same batches without I/O
};

// Runs a whole precompute. Throws UsageError/InputError/IoError. After a stop request (Ctrl-C) it
// commits and consolidates what is done and returns with `interrupted` set.
// What a precompute would produce, for `embcache run --dry-run`: the crop count of the dataset's
// grid and the feature bytes per crop (the encoder run once on zeros, on the CPU).
struct PrecomputeEstimate {
  std::int64_t windows = 0;
  std::int64_t crops = 0;
  std::int64_t bytes_per_crop = 0;
  std::vector<std::string> levels;  // "name [C, H, W]"
};
PrecomputeEstimate estimate_precompute(const PrecomputeOptions& options);

// Throws the UsageError run_precompute would raise for `options` alone (values and their forms),
// without opening the encoder or the dataset: `embcache run` checks a whole config before it runs.
void check_precompute_options(const PrecomputeOptions& options);

PrecomputeSummary run_precompute(const PrecomputeOptions& options, const PrecomputeHooks& hooks = {});

}  // namespace embcache
