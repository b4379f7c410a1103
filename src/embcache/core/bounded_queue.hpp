// A fixed-capacity blocking queue joining two pipeline stages; closing it wakes every waiter.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <set>

namespace embcache {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(std::size_t capacity) : capacity_(capacity) {}

  // Called after every push, pop and close, outside the queue's lock; lets a thread that waits on
  // several queues (the I/O stage) sleep on one condition variable of its own.
  void set_listener(std::function<void()> listener) { listener_ = std::move(listener); }

  // Blocks while full; false when the queue was closed (the item is dropped). Wakes a consumer
  // only when it has what it waits for: an encoder waiting for a batch of 64 crops is woken once,
  // not by each crop (each wake-up took the core from the stage that was filling the batch).
  bool push(T item) {
    bool enough = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
      if (closed_) return false;
      items_.push_back(std::move(item));
      enough = !wanted_.empty() && items_.size() >= *wanted_.begin();
    }
    if (enough) not_empty_.notify_all();  // a pop() and a wait_for_items() may both wait
    notify_listener();
    return true;
  }

  // Blocks while empty; nullopt once closed and drained.
  std::optional<T> pop() {
    std::optional<T> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wait_until_queued(lock, 1);
      if (items_.empty()) return std::nullopt;
      item = std::move(items_.front());
      items_.pop_front();
    }
    not_full_.notify_all();  // a push() and a wait_for_space() may both wait
    notify_listener();
    return item;
  }

  std::optional<T> try_pop() {
    std::optional<T> item;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (items_.empty()) return std::nullopt;
      item = std::move(items_.front());
      items_.pop_front();
    }
    not_full_.notify_all();  // a push() and a wait_for_space() may both wait
    notify_listener();
    return item;
  }

  // Producers call close() when done: consumers drain what is left, then pop() returns nullopt.
  // On failure close() also unblocks producers, whose push() then returns false.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    not_empty_.notify_all();
    not_full_.notify_all();
    notify_listener();
  }

  // Blocks until `n` items (at most the capacity) are queued or the queue is closed.
  void wait_for_items(std::size_t n) const {
    n = std::min(n, capacity_);
    if (n == 0) return;
    std::unique_lock<std::mutex> lock(mutex_);
    wait_until_queued(lock, n);
  }

  // Blocks until there is room for an item or the queue is closed.
  void wait_for_space() const {
    std::unique_lock<std::mutex> lock(mutex_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
  }

  bool has_space() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !closed_ && items_.size() < capacity_;
  }
  bool has_items() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !items_.empty();
  }
  // Whether wait_for_items(n) would return at once: n items (at most the capacity) are queued,
  // or the queue is closed (unlike has_items(), true for a closed, empty queue).
  bool items_ready(std::size_t n) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return closed_ || items_.size() >= std::min(n, capacity_);
  }
  bool drained() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return closed_ && items_.empty();
  }

 private:
  // Under the lock: waits until `n` items are queued or the queue is closed, with `n` among the
  // counts that push() wakes consumers for.
  void wait_until_queued(std::unique_lock<std::mutex>& lock, std::size_t n) const {
    const auto want = wanted_.insert(n);
    not_empty_.wait(lock, [&] { return closed_ || items_.size() >= n; });
    wanted_.erase(want);
  }

  void notify_listener() {
    if (listener_) listener_();
  }
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  mutable std::condition_variable not_empty_, not_full_;
  std::deque<T> items_;
  mutable std::multiset<std::size_t> wanted_;  // what each waiting consumer waits for
  bool closed_ = false;
  std::function<void()> listener_;
};

}  // namespace embcache
