// --train-fraction: nested, deterministic subsets of the train split. Whole windows are taken
// (a window's crops never split), in the order of a hash of their key, per class for
// classification (a window counts for its most common class) and over all windows otherwise,
// until round(fraction x rows) rows of the stratum are in. The order does not depend on the
// fraction, so the rows of 1% are inside the rows of 10%.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace embcache {

struct TrainRowKeys {
  std::vector<std::uint64_t> window;  // per train row (split order): a hash of (group, window)
  std::vector<std::int64_t> label;    // per train row: its class; empty = stratify by window only
  std::vector<std::string> class_names;  // for errors; may be empty
};

// The train-split positions (ascending) of `fraction` in (0, 1]. InputError naming the class
// when the fraction leaves a class of the train split without a row.
std::vector<std::int64_t> fraction_rows(const TrainRowKeys& keys, double fraction);

}  // namespace embcache
