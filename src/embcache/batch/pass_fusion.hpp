// How `embcache run` fuses probe runs into train-probe passes: runs that share every option but
// head, levels, lr, weight decay, C, k, train fraction and seed train together when those form a
// full grid (docs/run.md, "Running"); the rest go by (head, levels), else alone.
#pragma once

#include <cstddef>
#include <vector>

#include "embcache/batch/study_config.hpp"
#include "embcache/probe/probe_plan.hpp"

namespace embcache {

// Runs trained together in one train-probe pass: they share everything but the grid fields
// above, and those form a full grid (so the pass trains exactly these runs). The pass's
// grid lists the runs' combinations in `runs` order: outcome i belongs to runs[i].
struct Pass {
  std::vector<std::size_t> runs;  // indices into Study::runs
  ProbePlan plan;
};

// The passes that train exactly `runs` (indices into study.runs), in the order the runs come.
std::vector<Pass> fuse_runs(const Study& study, const std::vector<std::size_t>& runs);

}  // namespace embcache
