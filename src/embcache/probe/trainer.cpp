#include "embcache/probe/trainer.hpp"

#include <ATen/Parallel.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <memory>

#include "embcache/host/cpu_info.hpp"
#include "embcache/core/error.hpp"
#include "embcache/host/intra_op_threads.hpp"
#include "embcache/host/allocator_scope.hpp"
#include "embcache/probe/epoch_training.hpp"
#include "embcache/probe/knn_votes.hpp"
#include "embcache/probe/logreg_fits.hpp"
#include "embcache/probe/pass_outputs.hpp"
#include "embcache/probe/probe_pass.hpp"

namespace embcache {
namespace {

// The heads run as TorchScript on the plain interpreter while a pass trains: the same numbers on
// every call (no profiling-driven re-optimisation). The process's setting is given back after.
class PlainInterpreter {
 public:
  PlainInterpreter() : before_(torch::jit::getGraphExecutorOptimize()) { torch::jit::setGraphExecutorOptimize(false); }
  ~PlainInterpreter() { torch::jit::setGraphExecutorOptimize(before_); }
  PlainInterpreter(const PlainInterpreter&) = delete;
  PlainInterpreter& operator=(const PlainInterpreter&) = delete;

 private:
  bool before_;
};

// --threads, or else LibTorch's default (one thread per core of the machine) capped by the CPUs
// this process may run on: in a Slurm task's cpuset or under taskset the default would run more
// threads than those CPUs (libgomp then sleeps and wakes them around every parallel region).
void use_probe_threads(int threads_option) {
  if (threads_option > 0) {
    use_intra_op_threads(threads_option);
  } else {
    use_intra_op_threads(std::min(at::get_num_threads(), usable_cpus()));
  }
}

}  // namespace

void preflight_probe(const ProbePlan& plan) {
  std::vector<std::unique_ptr<CacheReader>> caches;
  for (const auto& path : plan.options.caches) caches.push_back(std::make_unique<CacheReader>(path));
  if (caches.empty()) throw UsageError(OptionName{"cache"}, "at least one cache is needed");
  check_caches_for_task(caches, plan.task);
  // Each head of the grid on its level set, as the pass will configure it: shapes come from the
  // cache, so a conv head on a vector level fails here rather than mid-study.
  const CacheReader& first = *caches.front();
  const bool pixel_values = plan.task == ProbeTask::kPixelRegression && first.label_kinds().has_pixel_value;
  const auto out_size = pixel_values ? first.pixel_value_shape() : first.mask_shape();  // as ProbeData
  for (const auto& c : plan.grid) configure_head(c.head, c.levels, first, out_size, /*outputs=*/0, plan);
}

ProbeResult train_probe(const ProbePlan& plan, const ProbeHooks& hooks) {
  // The feed's producer thread allocates every block the trainer frees: with glibc's defaults
  // (a heap per thread, trimmed when its top is free; large blocks mmapped) the heads' batches
  // are page-faulted anew on every pass. One arena that keeps its memory, as precompute's encoder
  // gets; the stream tier's memory stays bounded by its budget.
  const EncoderAllocatorScope allocator;
  const PlainInterpreter interpreter;
  const IntraOpThreadsScope restore_threads;
  use_probe_threads(plan.options.threads);
  ProbePass pass(plan);
  const HeadSaverOf member_saver = [&pass](const Combination& c) { return pass.member_saver(c); };
  switch (plan.grid.front().head) {  // logreg and knn are planned alone
    case HeadType::kKnn: {
      const KnnVotes votes(pass);
      pass.choose_best();
      return write_pass_outputs(pass, [&votes](const Combination& c) { return votes.head_saver(c); },
                                hooks.on_combination);
    }
    case HeadType::kLogreg:
      fit_logregs(pass);
      break;
    default:
      train_epochs(pass, hooks.bank_lanes);
  }
  pass.test_best_states();
  return write_pass_outputs(pass, member_saver, hooks.on_combination);
}

}  // namespace embcache
