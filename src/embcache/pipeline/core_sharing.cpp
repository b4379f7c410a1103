#include "embcache/pipeline/core_sharing.hpp"

#include <ATen/Parallel.h>
#include <omp.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "embcache/host/cpu_info.hpp"
#include "embcache/core/error.hpp"

namespace embcache {

const EnumTable<StageScheduling>& stage_schedulings() {
  static const EnumTable<StageScheduling> table{
      {StageScheduling::kAuto, "auto"}, {StageScheduling::kIdle, "idle"}, {StageScheduling::kNormal, "normal"}};
  return table;
}

StagePriority::StagePriority(StageScheduling mode, bool spare_cores)
    : adaptive_(mode == StageScheduling::kAuto),
      state_(mode == StageScheduling::kNormal ? kNormal
             : mode == StageScheduling::kIdle ? kIdle
             : spare_cores                    ? kSpareCores
                                              : kUndecided) {}

bool encoder_leaves_cores_free(int threads) { return threads < usable_cpus(); }

void StagePriority::follow(bool& normal_now) const {
  const int s = state_.load(std::memory_order_relaxed);
  const bool want_normal = normal(s);
  sched_param param{};
  // Leaving SCHED_IDLE may be refused without privileges (RLIMIT_NICE): then the stage stays idle.
  if (want_normal != normal_now) {
    if (pthread_setschedparam(pthread_self(), want_normal ? SCHED_OTHER : SCHED_IDLE, &param) == 0 || !want_normal) {
      normal_now = want_normal;
    } else {
      normal_now = true;  // do not retry every item
    }
  }
  if (normal_now) return;
  std::unique_lock<std::mutex> lock(gate_mutex_);
  gate_open_.wait(lock, [&] { return !encoder_in_call_ || normal(state_.load(std::memory_order_relaxed)); });
}

void StagePriority::encoder_call_begins() {
  std::lock_guard<std::mutex> lock(gate_mutex_);
  encoder_in_call_ = true;
}

void StagePriority::encoder_call_ends() {
  {
    std::lock_guard<std::mutex> lock(gate_mutex_);
    encoder_in_call_ = false;
  }
  gate_open_.notify_all();
}

void StagePriority::observe(double feature_bytes, double seconds) {
  encoder_seconds_ += seconds;
  if (state_.load(std::memory_order_relaxed) != kUndecided) return;
  fastest_rate_ = std::max(fastest_rate_, feature_bytes / std::max(seconds, 1e-9));
  if (++observed_ < kObservedBatches) return;
  switch_to(fastest_rate_ >= kWriterBytesPerSecond ? kNormal : kIdle);
}

namespace {

// The second field of a thread's schedstat: nanoseconds runnable but waiting for a CPU. Read
// with pread on a file opened once (procfs regenerates it at offset 0); -1 once unreadable.
double run_delay_seconds(int fd) {
  if (fd < 0) return -1;
  char text[128];
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  unsigned long long on_cpu = 0, waiting = 0;
  if (std::sscanf(text, "%llu %llu", &on_cpu, &waiting) != 2) return -1;
  return double(waiting) * 1e-9;
}

}  // namespace

StagePriority::~StagePriority() {
  for (const Watched& w : watched_) {
    if (w.fd >= 0) ::close(w.fd);
  }
}

void StagePriority::watch_this_thread() const {
  const std::string path = "/proc/self/task/" + std::to_string(::gettid()) + "/schedstat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::lock_guard<std::mutex> lock(watched_mutex_);
  watched_.push_back({fd, run_delay_seconds(fd)});
}

double StagePriority::stage_run_delay() const {
  std::lock_guard<std::mutex> lock(watched_mutex_);
  double total = 0;
  for (Watched& w : watched_) {
    if (w.last_delay < 0) return -1;  // no schedstat here
    const double now = run_delay_seconds(w.fd);
    if (now >= 0) w.last_delay = now;  // else the thread has ended: its last reading stands
    total += w.last_delay;
  }
  return total;
}

bool StagePriority::watching() const { return adaptive_ && !normal(state_.load(std::memory_order_relaxed)); }

void StagePriority::encoder_waited(double seconds, double stage_run_delay) {
  if (!watching()) return;
  waited_seconds_ += seconds;
  if (stage_run_delay >= 0) {
    delayed_seconds_ += stage_run_delay;
  } else {
    delay_known_ = false;  // then the waits alone decide
  }
  const bool long_waits =
      waited_seconds_ >= kStarvedSeconds && waited_seconds_ >= kStarvedShare * (waited_seconds_ + encoder_seconds_);
  const bool wanted_cores = !delay_known_ || delayed_seconds_ >= kStarvedDelayShare * waited_seconds_;
  if (long_waits && wanted_cores) switch_to(kStarved);
}

double StagePriority::encoder_waits(const std::function<void()>& wait) {
  const bool watched = watching();
  const double before = watched ? stage_run_delay() : -1;
  const auto start = std::chrono::steady_clock::now();
  wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (watched) {
    const double after = before >= 0 ? stage_run_delay() : -1;
    encoder_waited(seconds, after >= 0 ? after - before : -1);
  }
  return seconds;
}

void StagePriority::switch_to(int state) {
  state_.store(state);
  std::lock_guard<std::mutex> lock(gate_mutex_);  // stages waiting at the gate see the decision
  gate_open_.notify_all();
}

std::string StagePriority::decision() const {
  switch (state_.load()) {
    case kNormal:
      return "normal";
    case kStarved:
      return "normal (idle stages starved)";
    case kSpareCores:
      return "normal (spare cores)";
    case kIdle:
      return "idle";
    default:
      return "idle (undecided)";
  }
}

bool StagePriority::wait_decided(const std::function<bool()>& finished) const {
  // Woken by the decision and at the end of each encoder call (both notify gate_open_); the
  // timeout only bounds how late `finished` is seen. Frequent polling would wake this thread
  // often, each time taking a core from the encoder's OpenMP workers.
  std::unique_lock<std::mutex> lock(gate_mutex_);
  while (state_.load() == kUndecided && !finished()) gate_open_.wait_for(lock, std::chrono::milliseconds(20));
  return state_.load() == kNormal;
}

void wait_with_openmp_workers_asleep(int threads, const std::function<void()>& wait) {
  if (threads < 2 || omp_in_parallel()) {
    wait();
    return;
  }
  std::mutex mutex;
  std::condition_variable woken;
  bool done = false;
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    if (omp_get_thread_num() == 0) {
      try {
        wait();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        done = true;
      }
      woken.notify_all();
    } else {
      std::unique_lock<std::mutex> lock(mutex);
      woken.wait(lock, [&] { return done; });
    }
  }
  if (error) std::rethrow_exception(error);
}

void without_openmp_team(const std::function<void()>& body) {
  // LibTorch sets a thread's OpenMP thread count to the process's intra-op count at the thread's
  // first parallel loop; at::get_num_threads() makes that happen now (inside LibTorch, whose
  // per-thread flag it is), before the count is set to 1 for this thread. The encoder's thread
  // keeps its own.
  at::get_num_threads();
  omp_set_num_threads(1);
  body();
}

OpenMpSpinThrottle::OpenMpSpinThrottle(int threads) : active_(threads >= 2) {
  if (!active_) return;
  // A parallel region that does (almost) nothing: its workers stay in this thread's pool,
  // asleep, and count. (GCC removes a region that is empty.)
  std::atomic<int> started{0};
#pragma omp parallel num_threads(threads)
  started.fetch_add(1, std::memory_order_relaxed);
}

OpenMpSpinThrottle::~OpenMpSpinThrottle() {
  // Frees this thread's pool, so later work in the process (a heavy encoder, a probe) spins as
  // libgomp would by default.
  if (active_) omp_pause_resource_all(omp_pause_soft);
}

}  // namespace embcache
