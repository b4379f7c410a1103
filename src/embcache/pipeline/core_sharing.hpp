// How the encoder and the stages around it (reading, converting, writing) share the CPU cores
// during precompute (docs/performance.md, "The encoder keeps the cores").
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "embcache/core/enum_table.hpp"

namespace embcache {

// Scheduling of the non-encoder stages (docs/performance.md, "The encoder keeps the cores"). On a
// machine whose cores the encoder's intra-op threads fill, a stage that takes a core from one of
// them stalls a whole parallel region. Under SCHED_IDLE they run
// in the encoder's gaps, or while it waits on a full queue. "auto" starts idle and decides after
// the first stored batches: an encoder that makes features faster than the writer can take them
// is light, and then every stage moves to normal scheduling (the I/O thread is the bottleneck
// and must not wait for gaps) and the encoder's OpenMP spinning is throttled. Other busy
// processes can starve idle stages (a SCHED_IDLE thread gets ~0.3% of a core that a normal thread
// wants): under auto they then move to normal scheduling (encoder_waited). "idle" never moves.
// An encoder that leaves cores free (--threads below the cores the process may run on) has
// nothing to share: under auto its stages run at normal scheduling from the start, ungated, on
// the free cores, and its OpenMP workers spin on their own cores as libgomp would.
enum class StageScheduling { kAuto, kIdle, kNormal };
const EnumTable<StageScheduling>& stage_schedulings();  // --stage-priority

class StagePriority {
 public:
  // `spare_cores`: the encoder computes on the CPU and leaves cores free (encoder_leaves_cores_free).
  explicit StagePriority(StageScheduling mode, bool spare_cores = false);
  ~StagePriority();
  StagePriority(const StagePriority&) = delete;
  StagePriority& operator=(const StagePriority&) = delete;

  // Called by each stage thread at start and then once per item: applies the current decision.
  // At idle scheduling it also waits while the encoder is inside a forward call on the CPU.
  void follow(bool& normal_now) const;
  // The encoder thread brackets each forward call on the CPU. SCHED_IDLE alone did not keep the
  // stages out of its way: an idle stage runs whenever an OpenMP worker of the encoder sleeps
  // between two parallel regions, and the next region then waits for that worker to be woken and
  // to take its core back. With many small regions (MobileNetV2: thousands per second), wall /
  // encoder-only was 1.06-1.30 ungated and 1.06-1.08 gated. Gated, idle stages run between
  // calls and while the encoder waits for them (its workers asleep, see below).
  void encoder_call_begins();
  void encoder_call_ends();
  // The encoder thread reports each stored batch: its feature bytes and encoder seconds. Under
  // auto, decided once after kObservedBatches, on the fastest of them (the first calls of a
  // TorchScript module are slow while its graph is optimised).
  void observe(double feature_bytes, double seconds);
  // Each stage thread but the encoder's calls this once, at its start.
  void watch_this_thread() const;
  // Seconds the watched threads have spent runnable but without a core (the kernel's per-thread
  // schedstat); negative where the kernel does not say.
  double stage_run_delay() const;
  // Whether waits are being judged: under auto while the stages are idle.
  bool watching() const;
  // The encoder thread reports each wait for the stages (for crops, or for room to hand over
  // features): its length and the watched threads' run delay meanwhile (negative: unknown).
  // Idle stages that keep the encoder waiting while they wait for a core are starved, not
  // running in its gaps: on a free machine the encoder of a heavy run waits a few percent of its
  // time, beside a build or another run for most of it. Under
  // auto, once its waits reach kStarvedSeconds and kStarvedShare of its time, and the stages spent
  // at least kStarvedDelayShare of those waits runnable without a core (not in a slow read), the
  // stages move to normal scheduling for the rest of the run.
  void encoder_waited(double seconds, double stage_run_delay);
  // The encoder thread runs each wait for the stages through this: `wait` runs, and while
  // watching, its length and the watched threads' run delay meanwhile go to encoder_waited.
  // Returns the wait's length in seconds.
  double encoder_waits(const std::function<void()>& wait);
  // Blocks until decided, or until `finished` says the run is over (looked at after each
  // encoder call, and at least every 20 ms); true when the stages run at normal scheduling
  // because the encoder is light (or as told); false with spare cores, whose workers need no throttle.
  bool wait_decided(const std::function<bool()>& finished) const;
  // normal | idle | idle (undecided) | normal (idle stages starved) | normal (spare cores)
  std::string decision() const;

  static constexpr double kStarvedSeconds = 1.0;
  static constexpr double kStarvedShare = 0.25;
  static constexpr double kStarvedDelayShare = 0.5;

 private:
  static constexpr int kObservedBatches = 8;
  enum { kUndecided, kIdle, kNormal, kStarved, kSpareCores };
  static bool normal(int state) { return state == kNormal || state == kStarved || state == kSpareCores; }
  void switch_to(int state);
  const bool adaptive_;  // auto: the decision may change
  std::atomic<int> state_;
  mutable std::mutex gate_mutex_;
  mutable std::condition_variable gate_open_;
  bool encoder_in_call_ = false;  // under gate_mutex_
  // Encoder thread only:
  int observed_ = 0;
  double fastest_rate_ = 0;
  double encoder_seconds_ = 0;  // stored batches' calls
  double waited_seconds_ = 0;
  double delayed_seconds_ = 0;  // the watched threads' run delay during those waits
  bool delay_known_ = true;
  struct Watched {
    int fd;  // its /proc/self/task/TID/schedstat, or -1
    double last_delay;  // kept for a thread that has ended
  };
  mutable std::mutex watched_mutex_;
  mutable std::vector<Watched> watched_;
};

// Whether an encoder with `threads` intra-op threads on the CPU leaves at least one of the cores
// this process may run on (its CPU affinity: taskset, a Slurm job's cpuset) free for the stages.
bool encoder_leaves_cores_free(int threads);

// Features per second the writer is assumed to take; an encoder that makes more is light. Below
// what plain HDF5 writes take on a local disk, and far from both kinds of encoder: light ones
// make several GB/s of features, compute-bound ones a tenth of a GB/s or less.
constexpr double kWriterBytesPerSecond = 2e9;

// Runs `wait` (a call that blocks until the encoder's next input is ready) with this thread's
// idle OpenMP workers asleep. After a parallel region libgomp's workers spin ~300000 iterations
// (milliseconds) before they sleep, so through a wait for the stages they hold cores the stages
// need.
// Here the workers join a parallel region and sleep on a condition variable until `wait`
// returns. `threads` is the intra-op thread count the encoder runs with (the same team is
// reused). Exceptions from `wait` are rethrown after the region.
void wait_with_openmp_workers_asleep(int threads, const std::function<void()>& wait);

// Runs `body` with this thread's OpenMP parallel regions limited to one thread, for the stage
// threads around the encoder. An ATen operation that goes parallel in a thread of its own opens
// an OpenMP team for that thread; once libgomp manages more threads than there are CPUs, every
// idle worker in the process spins only 100 iterations before it sleeps (see above), and the
// encoder's workers would be woken by a futex for each of its parallel regions.
void without_openmp_team(const std::function<void()>& body);

// While alive, idle OpenMP workers spin briefly instead of for milliseconds before they sleep. libgomp
// spins 300000 iterations after each parallel region by default, but only 100 while it manages
// more OpenMP threads than there are CPUs (GCC manual, GOMP_SPINCOUNT). An encoder with one
// thread per core keeps its workers spinning through every gap between parallel regions, on the
// cores the reading, converting and writing threads need. This opens a second, idle team of
// `threads` threads in the calling thread's pool, which puts libgomp over the CPU count; the
// destructor frees that pool. Spinning never changes results. Open it from a thread that runs
// no stage (precompute uses a helper thread; the stage threads keep OpenMP to one thread).
// For light encoders only (docs/performance.md): with 100 spins the workers of a compute-bound
// encoder sleep between its regions.
class OpenMpSpinThrottle {
 public:
  explicit OpenMpSpinThrottle(int threads);
  ~OpenMpSpinThrottle();
  OpenMpSpinThrottle(const OpenMpSpinThrottle&) = delete;
  OpenMpSpinThrottle& operator=(const OpenMpSpinThrottle&) = delete;

 private:
  bool active_;
};

}  // namespace embcache
