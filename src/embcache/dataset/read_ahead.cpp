#include "embcache/dataset/read_ahead.hpp"

#include <algorithm>
#include <stdexcept>

#include "embcache/host/thread_name.hpp"

namespace embcache {

ReadAheadSource::ReadAheadSource(std::unique_ptr<WindowSource> inner, int threads)
    : inner_(std::move(inner)), depth_(std::size_t(std::max(1, threads)) * 2) {
  if (!inner_->concurrent_reads()) throw std::logic_error("ReadAheadSource: the source does not allow concurrent reads");
}

ReadAheadSource::~ReadAheadSource() {
  for (auto& [i, f] : ahead_) {
    if (f.valid()) f.wait();
  }
}

WindowData ReadAheadSource::read(std::size_t index) {
  const std::size_t count = inner_->windows().size();
  for (std::size_t i = index; i < std::min(count, index + depth_); ++i) {
    if (!ahead_.count(i)) {
      ahead_[i] = std::async(std::launch::async, [this, i] {
        name_this_thread("embcache read");
        return inner_->read(i);
      });
    }
  }
  auto it = ahead_.find(index);
  std::future<WindowData> future = std::move(it->second);
  ahead_.erase(it);
  for (auto j = ahead_.begin(); j != ahead_.end();) {  // a caller that skipped ahead: drop stale reads
    if (j->first < index) {
      j->second.wait();
      j = ahead_.erase(j);
    } else {
      ++j;
    }
  }
  return future.get();
}

}  // namespace embcache
