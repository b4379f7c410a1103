// ReadAheadSource over a fake source: windows come back in the order asked for, whatever order
// the reads finish in; a read's error is thrown for its own window; reads run on named threads.
#include "doctest_torch.hpp"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "embcache/dataset/read_ahead.hpp"

using namespace embcache;

namespace {

// Window i has label_class i; later windows read faster, so reads finish out of order.
class FakeSource : public WindowSource {
 public:
  explicit FakeSource(std::size_t n, std::size_t failing = SIZE_MAX) : failing_(failing) {
    for (std::size_t i = 0; i < n; ++i) windows_.push_back(WindowInfo{"g", "w" + std::to_string(i), "train", {}});
  }
  const std::vector<WindowInfo>& windows() const override { return windows_; }
  std::int64_t channels() const override { return 1; }
  LabelKinds label_kinds() const override { return {}; }
  std::string describe() const override { return "fake"; }
  bool concurrent_reads() const override { return true; }
  WindowData read(std::size_t index) override {
    ++reads;
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * (windows_.size() - index)));
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    {
      std::lock_guard<std::mutex> lock(mutex);
      thread_names.insert(name);
    }
    if (index == failing_) throw std::runtime_error("window " + std::to_string(index) + " is unreadable");
    WindowData d;
    d.label_class = std::int64_t(index);
    return d;
  }
  std::atomic<int> reads{0};
  std::mutex mutex;
  std::set<std::string> thread_names;

 private:
  std::vector<WindowInfo> windows_;
  std::size_t failing_;
};

}  // namespace

TEST_SUITE("dataset") {
TEST_CASE("read-ahead: windows in the order asked for, on threads named embcache read") {
  auto inner = std::make_unique<FakeSource>(9);
  FakeSource& fake = *inner;
  ReadAheadSource source(std::move(inner), 2);
  for (std::size_t i = 0; i < 9; ++i) CHECK(source.read(i).label_class == std::int64_t(i));
  CHECK(fake.reads == 9);
  CHECK(fake.thread_names == std::set<std::string>{"embcache read"});
}

TEST_CASE("read-ahead: a failed read is thrown for its own window, and skipping ahead drops skipped reads") {
  auto inner = std::make_unique<FakeSource>(8, 3);
  ReadAheadSource source(std::move(inner), 2);
  CHECK(source.read(0).label_class == 0);
  CHECK(source.read(2).label_class == 2);  // window 1 was read ahead and is dropped
  CHECK_THROWS_WITH_AS(source.read(3), "window 3 is unreadable", std::runtime_error);
  CHECK(source.read(4).label_class == 4);
  CHECK(source.read(7).label_class == 7);
}
}  // TEST_SUITE
