#include "embcache/probe/bank_lanes.hpp"

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
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
  std::uint64_t generation = 0;  // one per run(); helpers join each once
  bool closing = false;
  const std::function<void(std::size_t)>* work = nullptr;
  std::size_t count = 0;
  std::atomic<std::size_t> next{0};
  std::size_t helpers_busy = 0;
  std::exception_ptr error;

  // Takes indices until none is left.
  void drain() {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      try {
        (*work)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    }
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
      drain();
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

void BankLanes::run(std::size_t n, const std::function<void(std::size_t)>& work) {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.work = &work;
    s.count = n;
    s.next = 0;
    s.error = nullptr;
    s.helpers_busy = s.helpers.size();
    ++s.generation;
  }
  s.wake.notify_all();
  s.drain();
  std::unique_lock<std::mutex> lock(s.mutex);
  s.finished.wait(lock, [&] { return s.helpers_busy == 0; });
  s.work = nullptr;
  if (s.error) std::rethrow_exception(s.error);
}

}  // namespace embcache
