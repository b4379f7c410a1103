// Which shard of a dataset a run computes (`precompute --shard I/N`), as a value: parsed from the
// option, recorded in caches as "I/N", read back from them.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace embcache
