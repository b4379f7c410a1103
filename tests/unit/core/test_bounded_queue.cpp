#include "doctest_torch.hpp"

#include <atomic>
#include <thread>

#include "embcache/core/bounded_queue.hpp"
#include "test_support.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("core");

TEST_CASE("a queue wait for more items than the queue holds returns once it is full, or closed; items_ready(n) agrees") {
  BoundedQueue<int> queue(2);
  std::thread producer([&] {
    queue.push(1);
    queue.push(2);
  });
  queue.wait_for_items(5);  // capped at the capacity: a producer blocked on a full queue cannot add more
  producer.join();
  CHECK(queue.items_ready(5));  // items_ready(n) says whether wait_for_items(n) returns at once
  CHECK(queue.pop() == 1);
  CHECK(queue.items_ready(1));
  CHECK_FALSE(queue.items_ready(2));
  queue.wait_for_space();
  queue.close();
  CHECK(queue.items_ready(2));
  queue.wait_for_items(2);  // closed: returns with one item left
  CHECK(queue.pop() == 2);
  CHECK_FALSE(queue.pop().has_value());
}

TEST_CASE("a queue wakes each waiting consumer when what it waits for is queued: a pop at the first item, a batch at its last") {
  BoundedQueue<int> queue(8);
  std::atomic<int> batch_ready{0};
  std::atomic<bool> batch_returned{false}, popped{false};
  std::atomic<pid_t> batch_id{0}, single_id{0};
  std::thread batch([&] {
    batch_id = testing::thread_id();
    queue.wait_for_items(3);
    batch_returned = true;
    batch_ready = int(queue.items_ready(3));
  });
  std::thread single([&] {
    single_id = testing::thread_id();
    popped = queue.pop().has_value();
  });
  while (batch_id.load() == 0 || single_id.load() == 0) std::this_thread::yield();
  testing::wait_until_asleep(batch_id);  // both are waiting
  testing::wait_until_asleep(single_id);
  queue.push(1);  // wakes the pop, not the batch: one item is not three
  for (int i = 0; i < 6000 && !popped; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(popped.load());
  queue.push(2);
  queue.push(3);
  testing::wait_until_asleep(batch_id);
  CHECK_FALSE(batch_returned.load());  // two queued (the first was popped)
  queue.push(4);
  batch.join();
  single.join();
  CHECK(batch_ready.load() == 1);
  CHECK_FALSE(queue.items_ready(4));
  queue.wait_for_items(0);  // nothing to wait for
  queue.close();
  CHECK_FALSE(queue.push(5));
}

TEST_SUITE_END();
