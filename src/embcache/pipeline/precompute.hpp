// `precompute`: windows -> crops -> encoder -> cache, as stages joined by bounded queues
// (io_stage, prep_stage, encode_stage, convert_stage), run by a threaded executor, or one after
// another in the calling thread by a serial one (tests).
#pragma once

#include <cstdint>
#include <functional>

#include "embcache/pipeline/precompute_plan.hpp"
#include "embcache/pipeline/precompute_summary.hpp"

namespace embcache {

struct PrecomputeHooks {
  // After each encoder call: its batch size and seconds (tests count calls, the benchmark times them).
  std::function<void(std::int64_t batch, double seconds)> on_encoder_call;
  // Just before each encoder call, outside its seconds (the benchmark splits thread times into
  // inside the calls and between them).
  std::function<void()> on_encoder_call_start;
  // Run the stages one after another in this thread, every queue unbounded: the whole dataset's
  // crops and features are held in memory at once, so only for tests, which check that both
  // executors write the same cache.
  bool serial = false;
};

// Runs a whole precompute. Throws UsageError/InputError/IoError. After a stop request (Ctrl-C) it
// commits and consolidates what is done and returns with `interrupted` set.
PrecomputeSummary run_precompute(const PrecomputePlan& plan, const PrecomputeHooks& hooks = {});

}  // namespace embcache
