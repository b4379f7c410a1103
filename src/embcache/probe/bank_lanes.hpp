// Head banks trained side by side: on a CPU whose cores the intra-op threads do not fill (e.g.
// LibTorch's default of one thread per physical core where it counts one, or --threads 1), the
// banks take a lane each instead of waiting for one another. The trainer hands them a window of
// batches at a time (run_chains): each bank steps through the window in order, and a lane that
// finishes a step takes the next step of whichever bank is furthest behind, so banks that do not
// divide evenly over the lanes do not leave a lane idle after every batch. A grid of dense heads
// has one bank per combination (conv, fpn, unet and upernet members are not stacked), so this is
// what lets a grid of them cost less than the sum of its heads. Each lane runs ATen with the same
// intra-op thread count a lone run uses, so a bank's results do not change.
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <functional>
#include <memory>

namespace embcache {

// How many lanes to use: 1 on a GPU or when the intra-op threads fill the CPUs, otherwise
// cpus / intra_threads.
std::size_t bank_lane_count(const c10::Device& device, int intra_threads, unsigned cpus);

class BankLanes {
 public:
  // `lanes` lanes in all, the calling thread being one; every helper thread runs ATen with
  // `intra_threads` intra-op (OpenMP) threads.
  BankLanes(std::size_t lanes, int intra_threads);
  ~BankLanes();
  BankLanes(const BankLanes&) = delete;
  BankLanes& operator=(const BankLanes&) = delete;

  std::size_t lanes() const;
  // Runs work(c, s) for `chains` chains of `steps` steps: a chain's steps one after another (a
  // bank's optimizer steps over a window of batches), the chains side by side with no barrier
  // between steps. A free lane takes the step of the waiting chain with the fewest steps done, so
  // 3 chains on 2 lanes take about 1.5 x steps instead of the 2 x steps of a barrier per step.
  // After an exception no new step starts; the first is rethrown once the running ones finished.
  void run_chains(std::size_t chains, std::size_t steps, const std::function<void(std::size_t, std::size_t)>& work);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace embcache
