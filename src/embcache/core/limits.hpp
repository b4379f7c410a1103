// The fixed limits of option and study values: far above any real use and the same on every
// machine, so that a config that ran once runs everywhere, while a slip (an extra digit, 2^31
// epochs, a negative count) is refused in one line instead of running for hours or exhausting
// memory. docs/precompute.md, docs/train-probe.md and docs/run.md list them.
#pragma once

#include <cstdint>
#include <string>

#include "embcache/core/error.hpp"

namespace embcache {

inline constexpr std::int64_t kMaxThreads = 4096;         // --threads (precompute, train-probe)
inline constexpr std::int64_t kMaxReaderThreads = 256;    // --reader-threads
inline constexpr std::int64_t kMaxEncoderBatch = 65536;   // precompute --batch-size
inline constexpr std::int64_t kMaxProbeBatch = 1 << 20;   // train-probe --batch-size
inline constexpr std::int64_t kMaxEpochs = 100000;        // --epochs, --patience
inline constexpr std::int64_t kMaxBootstrap = 100000;     // --bootstrap resamples
inline constexpr std::int64_t kMaxClasses = 1000000;      // --num-classes, and the class ids of labels and masks
inline constexpr std::int64_t kMaxWidth = 65536;          // --hidden widths
inline constexpr std::int64_t kMaxConvBlocks = 64;        // --conv-blocks
inline constexpr std::int64_t kMaxK = 100000;             // --k
inline constexpr std::int64_t kMaxShards = 100000;        // a study's "shards", --shard I/N
inline constexpr std::int64_t kMaxCommitSeconds = 86400;  // --commit-seconds
inline constexpr std::int64_t kMaxSegmentMb = 1 << 20;    // --segment-mb

// UsageError about `option` unless least <= value <= most: "expected a whole number from LEAST
// to MOST, got VALUE" (`what` replaces "a whole number" where the option has a meaning of its own).
inline void require_in_range(std::int64_t value, std::int64_t least, std::int64_t most, const OptionName& option,
                             const std::string& what = "a whole number") {
  if (value >= least && value <= most) return;
  throw UsageError(option, "expected " + what + " from " + std::to_string(least) + " to " + std::to_string(most) +
                               ", got " + std::to_string(value));
}

}  // namespace embcache
