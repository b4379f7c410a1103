#include "embcache/core/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "embcache/core/error.hpp"

namespace embcache {

FileLock::FileLock(std::string path, const std::string& busy, const std::string& unwritable)
    : path_(std::move(path)) {
  for (int attempt = 0; attempt < 10; ++attempt) {
    fd_ = ::open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError("cannot create " + path_ + ": " + std::strerror(errno) + "; " + unwritable);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      std::string pid;
      std::ifstream(path_) >> pid;
      throw IoError(busy + " (" + (pid.empty() ? "another process" : "process " + pid) + " holds " + path_ + ")");
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
      return;
    }
    ::close(fd_);
  }
  throw IoError("cannot take the lock " + path_ + "; another process keeps replacing it");
}

FileLock::~FileLock() {
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace embcache
