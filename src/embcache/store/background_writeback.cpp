#include "embcache/store/background_writeback.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>

#include "embcache/host/thread_name.hpp"

namespace embcache {

BackgroundWriteback::BackgroundWriteback() : thread_([this] { run(); }) {}

BackgroundWriteback::~BackgroundWriteback() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void BackgroundWriteback::request(int fd, std::int64_t offset, std::int64_t length, bool drop) {
  if (length <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_.push_back({fd, offset, length, drop});
  }
  wake_.notify_one();
}

void BackgroundWriteback::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  draining_ = true;
  wake_.notify_one();
  idle_.wait(lock, [&] { return ranges_.empty() && !busy_ && !holding_; });
  draining_ = false;
}

void BackgroundWriteback::drop(const Range& range) {
  ::sync_file_range(range.fd, range.offset, range.length,
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  ::posix_fadvise(range.fd, range.offset, range.length, POSIX_FADV_DONTNEED);
}

std::int64_t BackgroundWriteback::ranges_submitted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_;
}

void BackgroundWriteback::run() {
  name_this_thread("embcache sync");
  sched_param param{};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);  // never refused: it lowers priority
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !ranges_.empty() || (holding_ && draining_); });
    if (ranges_.empty()) {
      if (holding_) {  // draining (or stopping): the last range to drop has no successor to wait for
        holding_ = false;
        busy_ = true;
        lock.unlock();
        drop(held_);
        lock.lock();
        busy_ = false;
        idle_.notify_all();
        continue;
      }
      return;  // stopping, and everything requested is done
    }
    const Range range = ranges_.front();
    ranges_.pop_front();
    busy_ = true;
    const bool drop_held = holding_;
    const Range previous = held_;
    holding_ = range.drop;
    if (range.drop) held_ = range;
    lock.unlock();
    ::sync_file_range(range.fd, range.offset, range.length, SYNC_FILE_RANGE_WRITE);
    if (drop_held) drop(previous);
    lock.lock();
    busy_ = false;
    ++submitted_;
    if (ranges_.empty() && !holding_) idle_.notify_all();
  }
}

}  // namespace embcache
