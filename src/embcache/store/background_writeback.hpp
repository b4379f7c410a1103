// Starts the kernel's writeback of file ranges from a helper thread, so that the thread writing
// the file does not spend its own time submitting pages to the disk; on request, drops ranges
// from the page cache once they are on disk (drop-behind).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

namespace embcache {

class BackgroundWriteback {
 public:
  // The helper runs under SCHED_IDLE: it is background work and yields to every other thread
  // (with a compute-bound encoder, it runs in the encoder's gaps on whichever core is free).
  BackgroundWriteback();
  // Waits for the ranges already requested, then stops the helper.
  ~BackgroundWriteback();
  BackgroundWriteback(const BackgroundWriteback&) = delete;
  BackgroundWriteback& operator=(const BackgroundWriteback&) = delete;

  // Asks for sync_file_range(SYNC_FILE_RANGE_WRITE) on [offset, offset + length) of `fd`, and
  // returns at once. With `drop`, the range is also dropped from the page cache once written:
  // when the next range has been submitted (the time it took is the range's time to reach the
  // disk), or at drain(). Best effort: errors are ignored (they surface at fsync and close).
  // `fd` must stay open until drain() returns.
  void request(int fd, std::int64_t offset, std::int64_t length, bool drop = false);
  // Returns once every requested range has been submitted, and dropped if asked.
  void drain();
  std::int64_t ranges_submitted() const;

 private:
  struct Range {
    int fd;
    std::int64_t offset, length;
    bool drop;
  };
  void run();
  // Waits for the range's writeback, then evicts its pages (clean now) from the page cache.
  static void drop(const Range& range);
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Range> ranges_;
  bool busy_ = false;
  bool stopping_ = false;
  bool draining_ = false;
  bool holding_ = false;  // held_ waits to be dropped
  Range held_{};
  std::int64_t submitted_ = 0;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace embcache
