// Benchmark for `precompute`: one run through the real pipeline (the same code as the CLI),
// the same batches through a freshly loaded copy of the encoder alone (no I/O, warm-up
// included as in the run; --warm-up-input pays the process's one-time costs before both), and
// plain HDF5 write speed measured in the same process as the yardstick. The encoder alone runs
// after the run, or in two passes around it (--alone-before-batches, --alone-after-batches;
// alone_seconds). Prints one JSON object, with what the machine did during the run and the
// encoder-only passes (host_load.hpp); scripts/bench_precompute.sh and
// scripts/bench_encoders.sh drive it. Not a test: it asserts nothing.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <utility>
#include <vector>

#include "embcache/core/error.hpp"
#include "embcache/host/intra_op_threads.hpp"
#include "embcache/host/allocator_scope.hpp"
#include "embcache/encoder/encoder.hpp"
#include "embcache/h5/h5.hpp"
#include "embcache/h5/process_settings.hpp"
#include "embcache/pipeline/precompute.hpp"
#include "embcache/store/cache_reader.hpp"
#include "host_load.hpp"
#include "thread_times.hpp"

namespace {

// Writes `megabytes` of float32 rows with HDF5 in 1 MiB chunks, no filters: the fastest way to
// put those bytes into an HDF5 file on this machine.
double plain_hdf5_write_mb_per_s(const std::string& path, std::int64_t megabytes) {
  using namespace embcache;
  const hsize_t row = 256 * 1024;  // 1 MiB rows of float32
  std::vector<float> buffer(row * 16, 1.25f);
  const auto t0 = std::chrono::steady_clock::now();
  {
    h5::File file = h5::create_file(path);
    const h5::Dataspace space = h5::simple_space({0, row}, {H5S_UNLIMITED, row}, path);
    const h5::PropertyList dcpl = h5::chunked_create_plist({1, row});
    const h5::Dataset ds = h5::create_dataset(file, "x", h5::little_endian<float>(), space, dcpl, path + ":/x");
    for (std::int64_t written = 0; written < megabytes; written += 16) {
      h5::append_rows(ds, h5::native<float>(), 16, buffer.data(), path);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove(path);
  return double(megabytes) * 1.048576 / seconds;
}

// What an encoder-only pass runs: the batches and their shape, and whether optimised.
struct AlonePass {
  bool optimized = false;
  std::int64_t batch_size = 0;
  std::vector<std::int64_t> input_shape;  // [C, H, W] of one crop
  std::int64_t batches = 0;
};

// The number of batches a finished run encoded.
std::int64_t batches_of(const embcache::PrecomputeSummary& run) {
  return (run.crops_computed + run.batch_size - 1) / run.batch_size;
}

// The pass that matches a finished run: its shape and optimisation, and `batches` batches (the
// run's when 0).
AlonePass alone_pass_of(const embcache::PrecomputeSummary& run, std::int64_t batches) {
  return {run.encoder_optimized, run.batch_size, run.input_shape, batches > 0 ? batches : batches_of(run)};
}

// The encoder alone for `batches` batches (the run's), from one or more passes of a fresh copy
// each. A pass's first two calls pay its copy's warm-up (TorchScript profiling and optimisation),
// as the run's first two did, so they count once: the mean of the passes' first two. The later
// calls of all passes are pooled, and their mean stands for each of the run's later batches.
// One pass of the run's batches gives its own sum; two give the mean of their sums. Passes
// before and after the run, half its batches each, take no longer than one pass after it and
// cancel a drift of the machine's speed that is linear in time.
double alone_seconds(const std::vector<const std::vector<double>*>& passes, std::int64_t batches) {
  double first_two = 0, later = 0;
  std::size_t later_calls = 0;
  for (const std::vector<double>* calls : passes) {
    const std::size_t head = std::min<std::size_t>(2, calls->size());
    first_two += std::accumulate(calls->begin(), calls->begin() + std::ptrdiff_t(head), 0.0) / double(passes.size());
    later += std::accumulate(calls->begin() + std::ptrdiff_t(head), calls->end(), 0.0);
    later_calls += calls->size() - head;
  }
  const std::int64_t later_batches = std::max<std::int64_t>(0, batches - 2);
  return first_two + (later_calls > 0 ? later / double(later_calls) * double(later_batches) : 0.0);
}

// The pass's batches through the encoder alone, with no I/O (after the run: the same number of
// batches of the same shape as it encoded). A freshly loaded copy: its first calls pay the warm-up
// (TorchScript profiling and optimisation, allocations) that the pipeline's encoder paid inside
// the wall time. Returns each call's seconds, and in *team_wait the seconds its threads were
// runnable without a core.
std::vector<double> encoder_only_call_seconds(const embcache::PrecomputePlan& plan, const AlonePass& pass,
                                              std::vector<double>* team_wait) {
  const embcache::EncoderAllocatorScope allocator;  // as inside the run: the comparison must be fair
  embcache::Encoder alone(plan.encoder, plan.device, plan.amp,
                          pass.optimized ? embcache::Optimization::kRequired : embcache::Optimization::kNone);
  embcache::use_intra_op_threads(plan.threads);
  std::vector<std::int64_t> shape{pass.batch_size};
  shape.insert(shape.end(), pass.input_shape.begin(), pass.input_shape.end());
  const at::Tensor batch = at::randn(shape);
  const std::int64_t batches = pass.batches;
  std::vector<double> calls;
  for (std::int64_t i = 0; i < batches; ++i) {
    const bench::ThreadTimes before = bench::ThreadTimes::now();
    const auto t0 = std::chrono::steady_clock::now();
    alone.forward(batch);
    if (plan.device.is_cuda()) torch::cuda::synchronize(plan.device.index());
    calls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    team_wait->push_back(bench::ThreadTimes::now().since(before).team_wait);
  }
  return calls;
}

// The process's one-time costs, paid before any clock starts: a throwaway copy of the encoder
// runs one batch of `input` ([C, H, W]). The first forward call in a process also generates
// oneDNN's kernels and grows the heap (ConvNeXt-T at 112 px: 2.55 s, against 1.15 s for the first
// call of a second copy); without this the run pays them and the encoder-only pass after it
// does not.
void warm_up_process(const embcache::PrecomputePlan& plan, const std::vector<std::int64_t>& input) {
  const embcache::EncoderAllocatorScope allocator;
  embcache::Encoder throwaway(plan.encoder, plan.device, plan.amp, embcache::encoder_optimization(plan));
  embcache::use_intra_op_threads(plan.threads);
  std::vector<std::int64_t> shape{plan.max_batch()};
  shape.insert(shape.end(), input.begin(), input.end());
  const at::Tensor batch = at::randn(shape);
  throwaway.forward(batch);
  if (plan.device.is_cuda()) torch::cuda::synchronize(plan.device.index());
}

}  // namespace

int main(int argc, char** argv) {
  embcache::tune_process();
  CLI::App app{"embcache precompute benchmark"};
  embcache::PrecomputeOptions options;
  std::int64_t plain_mb = 1024;
  app.add_option("--encoder", options.encoder)->required();
  app.add_option("--dataset", options.dataset)->required();
  app.add_option("--out", options.out)->required();
  app.add_option("--crop-size", options.crop_size);
  app.add_option("--batch-size", options.batch_size);
  app.add_option("--dtype", options.dtype);
  app.add_option("--levels", options.levels);
  app.add_option("--scale", options.scale);
  app.add_option("--segment-mb", options.segment_mb);
  app.add_flag("!--fsync-off", options.fsync);
  app.add_option("--plain-write-mb", plain_mb);
  app.add_option("--stage-priority", options.stage_priority);
  app.add_option("--threads", options.threads);
  app.add_option("--device", options.device, "auto, cpu, cuda or cuda:N, as precompute's");
  app.add_option("--amp", options.amp, "none, fp16 or bf16 (CUDA autocast), as precompute's");
  app.add_flag("--drop-behind", options.drop_behind);
  app.add_flag("--optimize", options.optimize);
  app.add_flag("--no-optimize", options.no_optimize);
  std::vector<std::int64_t> warm_up_input;
  app.add_option("--warm-up-input", warm_up_input,
                 "C,H,W: pay the process's one-time costs with a throwaway copy of the encoder first")
      ->delimiter(',');
  bool serial = false;
  app.add_flag("--serial", serial, "the stages one after another in this thread (no pipeline), for comparison");
  std::int64_t before_batches = 0;
  app.add_option("--alone-before-batches", before_batches,
                 "N: also time the encoder alone before the run, N batches of --warm-up-input's shape (the "
                 "run's); encoder_only_seconds then comes from the passes before and after the run "
                 "(alone_seconds), which cancels a drift of the machine's speed that is linear in time")
      ->check(CLI::NonNegativeNumber);
  std::int64_t after_batches = 0;
  app.add_option("--alone-after-batches", after_batches,
                 "N: batches of the pass after the run (default: the run's). With --alone-before-batches, "
                 "half the run's batches on each side take as long as one whole pass after it")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (before_batches > 0 && warm_up_input.empty()) {
    std::fprintf(stderr, "bench: --alone-before-batches needs --warm-up-input (the shape of the run's crops)\n");
    return 2;
  }
  options.overwrite = true;
  options.quiet = true;
  try {
    // Like the yardstick, the run writes a fresh file: the output of an earlier benchmark run is
    // removed before the clock starts (--overwrite would remove it inside the timed run).
    std::filesystem::remove(options.out);
    std::filesystem::remove_all(options.out + ".segments");
    // The yardstick is measured before and after the run (page-cache state changes it) and the
    // faster of the two is used: the comparison never flatters embcache.
    const double plain_before = plain_hdf5_write_mb_per_s(options.out + ".plain.h5", plain_mb);
    const embcache::PrecomputePlan plan = embcache::plan_precompute(options);
    // One allocator scope around the warm-up, the run and the encoder-only passes. The end of
    // the outermost scope returns the heap it kept to the system (malloc_trim, as embcache does
    // before a study's probes), so with a scope per pass each pass faulted in again the heap the
    // one before it had grown, and the warm-up did not do what it is for.
    const embcache::EncoderAllocatorScope heap_for_all_passes;
    if (!warm_up_input.empty()) warm_up_process(plan, warm_up_input);
    std::vector<double> before_calls, before_team_wait;
    nlohmann::json host_during_before;  // what the machine did meanwhile: a slow pass before is told from a slow machine
    if (before_batches > 0) {
      const AlonePass before{embcache::encoder_optimization(plan) == embcache::Optimization::kRequired,
                             plan.max_batch(), warm_up_input, before_batches};
      const bench::HostLoad before_load;
      before_calls = encoder_only_call_seconds(plan, before, &before_team_wait);
      host_during_before = before_load.since_start();
    }
    embcache::PrecomputeHooks hooks;
    hooks.serial = serial;
    // Each call's seconds, to tell a uniformly slower round from a few slow calls, and the thread
    // times inside each call and in the gap before it (since the previous call's end): did the
    // encoder's threads wait for a core, and how much CPU did the stages take. The times inside
    // a call compare with the encoder-only pass's, which are taken around its calls alone. A
    // sample costs about 0.14 ms (9 threads), two per call, counted in the run's wall outside
    // the calls' seconds: against embcache, never for it.
    std::vector<double> run_calls, run_team_wait, run_stage_cpu, gap_team_wait, gap_stage_cpu;
    bench::ThreadTimes last_end = bench::ThreadTimes::now(), call_start;
    hooks.on_encoder_call_start = [&] {
      call_start = bench::ThreadTimes::now();
      const bench::ThreadTimes::Delta gap = call_start.since(last_end);
      gap_team_wait.push_back(gap.team_wait);
      gap_stage_cpu.push_back(gap.stage_run);
    };
    hooks.on_encoder_call = [&](std::int64_t, double seconds) {
      last_end = bench::ThreadTimes::now();
      const bench::ThreadTimes::Delta inside = last_end.since(call_start);
      run_calls.push_back(seconds);
      run_team_wait.push_back(inside.team_wait);
      run_stage_cpu.push_back(inside.stage_run);
    };
    const bench::HostLoad run_load;
    const embcache::PrecomputeSummary summary = embcache::run_precompute(plan, hooks);
    const nlohmann::json host_during_run = run_load.since_start();
    if (summary.crops_computed == 0) throw embcache::InputError("the run encoded nothing; nothing to compare");
    nlohmann::json j = summary.to_json();
    if (summary.encoder_optimized) {  // what the run measured: max |optimised - plain| / max |plain| per output
      j["optimize_difference"] = embcache::CacheReader(options.out).signature()["computed_with"]["optimize_difference"];
    }
    const bench::HostLoad alone_load;
    std::vector<double> alone_team_wait;
    const AlonePass after = alone_pass_of(summary, after_batches);
    const std::vector<double> alone_calls = encoder_only_call_seconds(plan, after, &alone_team_wait);
    j["host_during_encoder_only"] = alone_load.since_start();
    const std::int64_t run_batches = batches_of(summary);
    double alone = alone_seconds({&alone_calls}, run_batches);
    if (!before_calls.empty()) {
      if (plan.max_batch() != after.batch_size) {
        std::fprintf(stderr, "bench: the pass before the run had batches of %lld, the run of %lld: the passes "
                     "do not time the run's work\n", (long long)plan.max_batch(), (long long)after.batch_size);
      }
      // Each pass's own sum, and the estimate from each alone: what the drift would have made of
      // a pass on one side only.
      j["encoder_only_before_seconds"] = std::accumulate(before_calls.begin(), before_calls.end(), 0.0);
      j["encoder_only_after_seconds"] = std::accumulate(alone_calls.begin(), alone_calls.end(), 0.0);
      j["encoder_only_seconds_before_only"] = alone_seconds({&before_calls}, run_batches);
      j["encoder_only_seconds_after_only"] = alone;
      j["encoder_only_before_call_seconds"] = before_calls;
      j["encoder_only_before_call_team_wait_seconds"] = before_team_wait;
      j["host_during_encoder_only_before"] = host_during_before;
      alone = alone_seconds({&before_calls, &alone_calls}, run_batches);
    }
    const std::size_t first_two = std::min<std::size_t>(2, alone_calls.size());
    const double first_calls = std::accumulate(alone_calls.begin(), alone_calls.begin() + first_two, 0.0);
    j["encoder_call_seconds"] = run_calls;
    j["encoder_only_call_seconds"] = alone_calls;
    j["encoder_call_team_wait_seconds"] = run_team_wait;
    j["encoder_call_stage_cpu_seconds"] = run_stage_cpu;
    j["encoder_gap_team_wait_seconds"] = gap_team_wait;
    j["encoder_gap_stage_cpu_seconds"] = gap_stage_cpu;
    j["encoder_only_call_team_wait_seconds"] = alone_team_wait;
    j["host_during_run"] = host_during_run;
    j["encoder_only_seconds"] = alone;
    j["encoder_only_first_calls_seconds"] = first_calls;
    j["wall_over_encoder_only"] = summary.seconds / alone;
    const double plain_after = plain_hdf5_write_mb_per_s(options.out + ".plain.h5", plain_mb);
    j["plain_hdf5_write_mb_per_second_before_after"] = {plain_before, plain_after};
    j["plain_hdf5_write_mb_per_second"] = std::max(plain_before, plain_after);
    j["mb_per_second_over_plain"] = j["mb_per_second"].get<double>() / j["plain_hdf5_write_mb_per_second"].get<double>();
    std::printf("%s\n", j.dump().c_str());
  } catch (const embcache::Error& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return int(e.code());
  }
  return 0;
}
