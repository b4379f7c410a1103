#include "embcache/pipeline/precompute_summary.hpp"

#include <cstdio>

#include "embcache/core/parse.hpp"

namespace embcache {

nlohmann::json PrecomputeSummary::to_json() const {
  nlohmann::json j;
  j["windows"] = windows;
  j["windows_skipped"] = windows_skipped;
  j["stage_priority"] = stage_priority;
  j["encoder_optimized"] = encoder_optimized;
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
  j["cache_parts"] = cache_parts;
  j["shard"] = shard;
  j["windows_not_read"] = windows_not_read;
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
  j["encoder_waits"] = encoder_waits;
  j["encoder_wait_seconds"] = encoder_wait_seconds;
  j["superseded_rows"] = superseded_rows;
  j["rows_copied_at_end"] = rows_copied_at_end;
  j["recovered_rows"] = recovered_rows;
  j["chunks_checksummed_on_io_thread"] = chunks_checksummed_on_io_thread;
  j["interrupted"] = interrupted;
  if (!warnings.empty()) j["warnings"] = warnings;  // absent when none, as in train-probe's metrics.json
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

}  // namespace embcache
