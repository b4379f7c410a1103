// The state the precompute stages share: the first error wins and closes every queue (so every
// waiter wakes), and the level specs the encoder stage finds on its first batch.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "embcache/store/cache_schema.hpp"

namespace embcache {

class RunContext {
 public:
  // Registered before any stage starts.
  void on_failure(std::function<void()> closer) { closers_.push_back(std::move(closer)); }
  void fail(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = error;
    }
    failed_ = true;
    for (auto& close : closers_) close();
  }
  bool failed() const { return failed_.load(); }
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  void set_levels(std::vector<LevelSpec> levels) {
    std::lock_guard<std::mutex> lock(mutex_);
    levels_ = std::move(levels);
  }
  std::vector<LevelSpec> levels() {
    std::lock_guard<std::mutex> lock(mutex_);
    return levels_;
  }

  // Runs `body` in a new thread; an exception it throws fails the run.
  std::thread start(std::function<void()> body) {
    return std::thread([this, body = std::move(body)] { run(body); });
  }
  // Runs `body` here (the serial executor); an exception it throws fails the run.
  void run(const std::function<void()>& body) {
    try {
      body();
    } catch (...) {
      fail(std::current_exception());
    }
  }

 private:
  std::mutex mutex_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
  std::vector<std::function<void()>> closers_;
  std::vector<LevelSpec> levels_;
};

}  // namespace embcache
