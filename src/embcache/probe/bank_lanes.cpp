#include "embcache/probe/bank_lanes.hpp"

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace embcache {

std::size_t bank_lane_count(const c10::Device& device, int intra_threads, unsigned cpus) {
  if (!device.is_cpu() || intra_threads < 1) return 1;
  return std::max<std::size_t>(1, cpus / unsigned(intra_threads));
}

struct BankLanes::Impl {
  std::size_t lanes;
  int intra_threads;
  std::vector<std::thread> helpers;
  std::mutex mutex;
  std::condition_variable wake, finished;
  std::uint64_t generation = 0;  // one per run_chains(); helpers join each once
  bool closing = false;
  std::function<void()> job;  // what every lane runs in this generation
  std::size_t helpers_busy = 0;
  std::exception_ptr error;
  // run_chains(): per chain, the steps started and whether one is running; chain_free wakes a
  // lane waiting for a chain that another lane holds.
  std::vector<std::size_t> started;
  std::vector<bool> running;
  std::condition_variable chain_free;

  // The chain a free lane takes: not running, steps left, fewest started (then lowest index).
  // started.size() when none is free; `waiting` says whether one has steps left but is running.
  std::size_t pick_chain(std::size_t steps, bool& waiting) const {
    std::size_t best = started.size();
    waiting = false;
    for (std::size_t c = 0; c < started.size(); ++c) {
      if (started[c] == steps) continue;
      if (running[c]) {
        waiting = true;
      } else if (best == started.size() || started[c] < started[best]) {
        best = c;
      }
    }
    return best;
  }

  // Takes steps of free chains until no chain has a step left to start (or one step failed).
  void drain_chains(std::size_t steps, const std::function<void(std::size_t, std::size_t)>& work) {
    std::unique_lock<std::mutex> lock(mutex);
    while (!error) {
      bool waiting = false;
      const std::size_t c = pick_chain(steps, waiting);
      if (c == started.size()) {
        if (!waiting) return;
        chain_free.wait(lock);
        continue;
      }
      const std::size_t s = started[c]++;
      running[c] = true;
      lock.unlock();
      std::exception_ptr failed;
      try {
        work(c, s);
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      running[c] = false;
      if (failed && !error) error = failed;
      chain_free.notify_all();
    }
  }

  // Runs `job` on every lane, the calling thread included, and rethrows the first error.
  void run_everywhere(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      job = std::move(work);
      error = nullptr;
      helpers_busy = helpers.size();
      ++generation;
    }
    wake.notify_all();
    job();
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [&] { return helpers_busy == 0; });
    job = nullptr;
    if (error) std::rethrow_exception(error);
  }

  void helper() {
    // LibTorch sets a thread's OpenMP count at its first parallel loop (at::get_num_threads()
    // makes that happen now); then the count a lone run's thread has.
    at::get_num_threads();
    omp_set_num_threads(intra_threads);
    std::uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return closing || generation != seen; });
        if (closing) return;
        seen = generation;
      }
      job();
      std::lock_guard<std::mutex> lock(mutex);
      if (--helpers_busy == 0) finished.notify_all();
    }
  }
};

BankLanes::BankLanes(std::size_t lanes, int intra_threads) : impl_(std::make_unique<Impl>()) {
  impl_->lanes = std::max<std::size_t>(1, lanes);
  impl_->intra_threads = std::max(1, intra_threads);
  for (std::size_t i = 1; i < impl_->lanes; ++i) impl_->helpers.emplace_back([this] { impl_->helper(); });
}

BankLanes::~BankLanes() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->closing = true;
  }
  impl_->wake.notify_all();
  for (auto& t : impl_->helpers) t.join();
}

std::size_t BankLanes::lanes() const { return impl_->lanes; }

void BankLanes::run_chains(std::size_t chains, std::size_t steps,
                           const std::function<void(std::size_t, std::size_t)>& work) {
  Impl& s = *impl_;
  s.started.assign(chains, 0);
  s.running.assign(chains, false);
  s.run_everywhere([&s, steps, &work] { s.drain_chains(steps, work); });
}

}  // namespace embcache
