#include "embcache/store/background_writeback.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>

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

void BackgroundWriteback::request(int fd, std::int64_t offset, std::int64_t length) {
  if (length <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_.push_back({fd, offset, length});
  }
  wake_.notify_one();
}

void BackgroundWriteback::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return ranges_.empty() && !busy_; });
}

std::int64_t BackgroundWriteback::ranges_submitted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_;
}

void BackgroundWriteback::run() {
  sched_param param{};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);  // never refused: it lowers priority
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !ranges_.empty(); });
    if (ranges_.empty()) return;  // stopping, and everything requested is done
    const Range range = ranges_.front();
    ranges_.pop_front();
    busy_ = true;
    lock.unlock();
    ::sync_file_range(range.fd, range.offset, range.length, SYNC_FILE_RANGE_WRITE);
    lock.lock();
    busy_ = false;
    ++submitted_;
    if (ranges_.empty()) idle_.notify_all();
  }
}

}  // namespace embcache
