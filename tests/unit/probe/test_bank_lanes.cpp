#include "doctest_torch.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "embcache/probe/bank_lanes.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("probe");

TEST_CASE("bank lanes: every step of every chain runs once, a chain's steps in order and never two at once") {
  BankLanes lanes(2, 1);
  const std::size_t chains = 3, steps = 5;
  std::mutex mutex;
  std::vector<std::vector<std::size_t>> seen(chains);
  std::vector<std::atomic<int>> inside(chains);
  std::atomic<bool> overlapped{false};
  lanes.run_chains(chains, steps, [&](std::size_t c, std::size_t s) {
    if (inside[c].fetch_add(1) != 0) overlapped = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    {
      std::lock_guard<std::mutex> lock(mutex);
      seen[c].push_back(s);
    }
    inside[c].fetch_sub(1);
  });
  CHECK_FALSE(overlapped);
  for (const auto& order : seen) CHECK(order == std::vector<std::size_t>{0, 1, 2, 3, 4});
}

TEST_CASE("bank lanes: a chain goes on to its next step while another chain's step still runs") {
  // Chain 0's first step waits for chain 1's second step to start: with a barrier after each
  // step that never happens and the wait times out.
  BankLanes lanes(2, 1);
  std::mutex mutex;
  std::condition_variable cv;
  bool second_started = false, waited_out = false;
  lanes.run_chains(2, 2, [&](std::size_t c, std::size_t s) {
    std::unique_lock<std::mutex> lock(mutex);
    if (c == 1 && s == 1) {
      second_started = true;
      cv.notify_all();
    }
    if (c == 0 && s == 0) {
      waited_out = !cv.wait_for(lock, std::chrono::seconds(20), [&] { return second_started; });
    }
  });
  CHECK_FALSE(waited_out);
  CHECK(second_started);
}

TEST_CASE("bank lanes: a failed step stops the chains and its error comes back") {
  BankLanes lanes(1, 1);  // the calling thread alone: the order is fixed
  int calls = 0;
  CHECK_THROWS_WITH_AS(lanes.run_chains(3, 4,
                                        [&](std::size_t c, std::size_t) {
                                          ++calls;
                                          if (c == 0) throw std::runtime_error("step failed");
                                        }),
                       "step failed", std::runtime_error);
  CHECK(calls == 1);
  // The lanes are usable again afterwards.
  calls = 0;
  lanes.run_chains(2, 3, [&](std::size_t, std::size_t) { ++calls; });
  CHECK(calls == 6);
}
