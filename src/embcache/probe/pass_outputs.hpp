// A finished pass's outputs: RUN_DIR (metrics.json, history.csv, the chosen head's head.pt, as
// probe/run_outputs.hpp writes them), each combination's outcome handed to the caller, and the
// one line train-probe prints.
#pragma once

#include <functional>
#include <string>

#include "embcache/probe/trainer.hpp"

namespace embcache {

class ProbePass;
struct Combination;

// How a combination's head.pt is written: a function of the path, or empty when it has none.
using HeadSaverOf = std::function<std::function<void(const std::string&)>(const Combination&)>;

// Writes RUN_DIR for the combination the pass chose, then calls `on_combination` (when set) for
// every combination by its index in the plan's grid.
ProbeResult write_pass_outputs(const ProbePass& pass, const HeadSaverOf& saver_of,
                               const std::function<void(const CombinationOutcome&)>& on_combination);

}  // namespace embcache
