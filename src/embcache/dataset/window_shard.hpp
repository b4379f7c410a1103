// Shards of a dataset (`precompute --shard I/N`): which windows shard I of N processes, decided
// by a hash of each window's key alone, so adding windows never moves existing ones; and the
// WindowSource that shows a shard's windows only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "embcache/core/shard_spec.hpp"
#include "embcache/dataset/window_source.hpp"

namespace embcache {

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

}  // namespace embcache
