// How the encoder and the stages around it (reading, converting, writing) share the CPU cores
// during precompute (docs/precompute.md, "Performance").
#pragma once

#include <atomic>
#include <string>

namespace embcache {

// Scheduling of the non-encoder stages. On a machine whose cores the encoder's intra-op threads
// fill, a stage that takes a core from one of them stalls a whole parallel region (measured: the
// encoder ran 20-30% slower inside the pipeline than alone on 2 cores). Under SCHED_IDLE they run
// in the encoder's gaps, or while it waits on a full queue. "auto" starts idle and moves every
// stage to normal scheduling once the encoder proves light (the I/O thread is then the
// bottleneck and must not wait for gaps). Other busy processes can starve idle stages, hence
// "normal" for shared machines.
class StagePriority {
 public:
  explicit StagePriority(const std::string& mode);  // auto | idle | normal

  // Called by each stage thread at start and then once per item: applies the current decision.
  void follow(bool& normal_now) const;
  // Under auto, decided once after 0.2 s of steady encoding: light when the encoder was busy
  // less than half of that time.
  void observe(double encoder_busy_seconds, double elapsed_seconds);
  std::string decision() const;  // normal | idle | idle (undecided)

 private:
  enum { kUndecided, kIdle, kNormal };
  std::atomic<int> state_;
};

// Features per second that the I/O thread is assumed to write on one core. Measured on the
// 2-core machine: plain HDF5 3.3-3.8 GB/s, the writer 3 GB/s; kept below both on purpose.
constexpr double kWriterBytesPerSecond = 2e9;

// The encoder threads to advise: `threads`, or one fewer when the encoder, measured with
// `threads` threads, makes features so fast that even with one thread fewer it outpaces the
// writer. The core it gives up goes to the writer; keeping it only stalls the encoder's parallel
// regions whenever the writer runs (the light benchmark: 1250-1590 MB/s with 2 encoder threads,
// 1700-1980 with 1). Advice only: features may differ in the last bit between thread counts, so
// a timing-based choice would break bit-identical reruns.
int encoder_threads_for(double feature_bytes_per_second, int threads);

}  // namespace embcache
