#include "doctest_torch.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "embcache/core/error.hpp"
#include "embcache/core/file_lock.hpp"
#include "test_support.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("core");

namespace {

const char* kBusy = "the cache is being written by another embcache process";

// The message of the IoError that taking the lock throws, or nullopt when it is taken.
std::optional<std::string> refusal(const std::string& path) {
  try {
    FileLock lock(path, kBusy, "choose another --out");
    return std::nullopt;
  } catch (const IoError& e) {
    return std::string(e.what());
  }
}

// A descriptor of `path` holding a shared flock, as file_lock_is_held takes one.
int take_shared_lock(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_SH | LOCK_NB) == 0);
  return fd;
}

}  // namespace

TEST_CASE("a lock its owner holds is refused, and is free once the owner lets go") {
  testing::TempDir dir;
  const std::string path = dir.file("owner.lock");
  CHECK_FALSE(file_lock_is_held(path));
  {
    FileLock owner(path, kBusy, "choose another --out");
    CHECK(file_lock_is_held(path));
    const auto why = refusal(path);
    REQUIRE(why);
    CHECK(why->find(kBusy) != std::string::npos);
    CHECK(why->find("process " + std::to_string(::getpid())) != std::string::npos);
  }
  CHECK_FALSE(file_lock_is_held(path));
  CHECK_FALSE(refusal(path));
}

TEST_CASE("a reader probing the lock does not make a starting writer fail") {
  // file_lock_is_held takes a shared lock for an instant; a writer that tries its exclusive lock
  // in that instant must wait it out, not report another writer. Here the probe's lock lasts
  // 30 ms, far longer than a real probe's.
  testing::TempDir dir;
  const std::string path = dir.file("owner.lock");
  const int probe = take_shared_lock(path);
  std::thread release([probe] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ::close(probe);
  });
  const auto why = refusal(path);
  release.join();
  CHECK_FALSE(why);
}

TEST_CASE("a shared lock that stays is refused like an owner's") {
  testing::TempDir dir;
  const std::string path = dir.file("owner.lock");
  const int holder = take_shared_lock(path);
  const auto started = std::chrono::steady_clock::now();
  const auto why = refusal(path);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ::close(holder);
  REQUIRE(why);
  CHECK(why->find(kBusy) != std::string::npos);
  CHECK(waited < 2.0);  // a moment, not a wait for the holder
}

TEST_SUITE_END();
