#include "embcache/core/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "embcache/core/error.hpp"

namespace embcache {

FileLock::FileLock(std::string path, const std::string& busy, const std::string& unwritable)
    : path_(std::move(path)) {
  // A reader's file_lock_is_held holds a shared lock for a few microseconds: a lock found busy is
  // tried again for a moment (kBusyTries x kBusyPause) before it counts as another owner's.
  constexpr int kBusyTries = 50;
  constexpr auto kBusyPause = std::chrono::milliseconds(2);
  int replaced = 0;
  int busy_tries = 0;
  while (!acquire(false, unwritable, nullptr)) {
    if (fd_ != -2) {
      if (++replaced == 10) throw IoError("cannot take the lock " + path_ + "; another process keeps replacing it");
      continue;
    }
    fd_ = -1;
    if (++busy_tries < kBusyTries) {
      std::this_thread::sleep_for(kBusyPause);
      continue;
    }
    std::string pid;
    std::ifstream(path_) >> pid;
    throw IoError(busy + " (" + (pid.empty() ? "another process" : "process " + pid) + " holds " + path_ + ")");
  }
}

FileLock::FileLock(std::string path, const Wait& wait) : path_(std::move(path)) {
  // Each holder unlinks the file when it lets go, so a waiter may wake on a file nobody else can
  // find: it tries again, as often as holders come and go.
  for (int attempt = 0; attempt < 100000; ++attempt) {
    if (acquire(true, wait.unwritable, &wait)) return;
  }
  throw IoError("cannot take the lock " + path_ + "; other processes keep replacing it");
}

bool FileLock::acquire(bool blocking, const std::string& unwritable, const Wait* wait) {
  fd_ = ::open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError("cannot create " + path_ + ": " + std::strerror(errno) + "; " + unwritable);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const int saved = errno;
      ::close(fd_);
      fd_ = -1;
      throw IoError("cannot lock " + path_ + ": " + std::strerror(saved) +
                    "; the file system does not support flock (Lustre: mount with -o flock; docs/scale-out.md)");
    }
    if (!blocking) {
      ::close(fd_);
      fd_ = -2;  // busy
      return false;
    }
    if (wait && wait->on_wait) {
      std::string pid;
      std::ifstream(path_) >> pid;
      wait->on_wait(path_, pid.empty() ? "another process" : "process " + pid);
    }
    int rc;
    do {
      rc = ::flock(fd_, LOCK_EX);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      const int saved = errno;
      ::close(fd_);
      fd_ = -1;
      throw IoError("cannot lock " + path_ + ": " + std::strerror(saved));
    }
  }
  // The previous owner may have unlinked the file between our open and flock: then the lock
  // we hold is on a file nobody else can find, and we try again.
  struct stat held {}, named {};
  if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
      held.st_dev == named.st_dev) {
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0 && ::write(fd_, pid.data(), pid.size()) < 0) {
      // The pid is informational only.
    }
    return true;
  }
  ::close(fd_);
  fd_ = -1;
  return false;
}

bool file_lock_is_held(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the probe's shared lock, if it got one
  return held;
}

FileLock::~FileLock() {
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace embcache
