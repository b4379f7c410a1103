// Shards of a dataset (`precompute --shard I/N`): which windows shard I of N processes, decided
// by a hash of each window's key alone, so adding windows never moves existing ones; and the
// WindowSource that shows a shard's windows only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "embcache/dataset/window_source.hpp"

namespace embcache {

struct ShardSpec {
  std::int64_t index = 0;  // I, 0-based
  std::int64_t count = 1;  // N; 1: the whole dataset
  bool whole() const { return count == 1; }
  std::string text() const { return std::to_string(index) + "/" + std::to_string(count); }
  bool operator==(const ShardSpec& o) const { return index == o.index && count == o.count; }
};

// "I/N" (0 <= I < N), or "slurm": I = SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN and
// N = SLURM_ARRAY_TASK_COUNT, read from the environment now. UsageError naming --shard.
ShardSpec parse_shard(const std::string& text);
// "I/N" back into a spec (as recorded in caches); nullopt-like whole() spec when malformed.
ShardSpec shard_from_text(const std::string& text);

// The shard (0 ... count-1) a window belongs to: its key's FNV-1a hash, mixed (splitmix64's
// finaliser, so that the low bits of similar names spread), modulo count. Stable: part of the
// cache contract (docs/scale-out.md).
std::int64_t shard_of_window(const std::string& group, const std::string& window, std::int64_t count);

// Which windows a run reads: those of its shard that `keep` accepts (`keep` empty: all of them).
struct WindowFilter {
  ShardSpec shard;
  std::function<bool(const WindowInfo&)> keep;
  bool everything() const { return shard.whole() && !keep; }
  bool accepts(const WindowInfo& w) const;
};

// `inner` with only the windows `filter` accepts, in their order; `inner` itself when it accepts
// everything. Read ahead (ReadAheadSource) over the result, not under it, so that nothing is
// read ahead for windows left out.
std::unique_ptr<WindowSource> filter_windows(std::unique_ptr<WindowSource> inner, const WindowFilter& filter);
std::unique_ptr<WindowSource> shard_windows(std::unique_ptr<WindowSource> inner, const ShardSpec& shard);

}  // namespace embcache
