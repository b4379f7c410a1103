// What a precompute run reports: counts, timings per stage, and where the wall time went; as
// JSON (--summary-json, docs/precompute.md) and as the one line the CLI prints.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "embcache/core/clock.hpp"

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
  std::int64_t cache_bytes = 0;    // size of the cache afterwards: the file, and its parts when it has them
  std::int64_t cache_parts = 0;    // parts of the cache afterwards (0: one file)
  std::string shard = "0/1";       // --shard
  std::int64_t windows_not_read = 0;  // --only-new-windows: windows whose crops were all cached
  std::int64_t batch_size = 0;
  nlohmann::json batch_size_trials = nlohmann::json::array();
  std::string device;
  int threads = 0;             // the encoder's intra-op threads
  std::string stage_priority;  // how the non-encoder stages ran: StagePriority::decision()
  bool encoder_optimized = false;  // frozen and optimised for inference (--optimize, or auto)
  // Busy time per stage: wall seconds (`stage_seconds`, preemption included) and the stage
  // thread's CPU seconds (`stage_cpu_seconds`).
  StageTime read_time, prep_time, convert_time, write_time;
  double consolidate_seconds = 0;   // closing and installing the cache at the end
  // Where the wall time outside the encoder's calls went: before its first call (loading the
  // encoder, opening the cache, the first batch's reading) and after its last one (the last
  // batches' writing, consolidation). Zero when nothing was encoded.
  double seconds_before_first_encoder_call = 0;
  double seconds_after_last_encoder_call = 0;
  // How often, and how long in all, the encoder waited for the other stages: for crops (the
  // first batch's too) or for room to hand its features on.
  std::int64_t encoder_waits = 0;
  double encoder_wait_seconds = 0;
  std::int64_t superseded_rows = 0;
  std::int64_t rows_copied_at_end = 0;  // 0 unless compression made the end copy this run's rows
  std::int64_t recovered_rows = 0;      // rows an interrupted run had committed, installed first
  std::int64_t chunks_checksummed_on_io_thread = 0;  // whole chunks of this run without row checksums
  std::vector<std::int64_t> input_shape;  // [C, h, w] of one crop given to the encoder (empty: none)
  bool interrupted = false;
  std::vector<std::string> warnings;  // also printed on stderr as they arise
  nlohmann::json to_json() const;
  std::string one_line() const;
};

}  // namespace embcache
