#include "embcache/store/file_space.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace embcache {

namespace {

void truncate_to_own_size(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    // ext4 and XFS free blocks reserved past the end even when the size does not change.
    [[maybe_unused]] const int rc = ::ftruncate(fd, st.st_size);
  }
}

}  // namespace

void SpaceReservation::extend(int fd, std::int64_t upcoming) {
  if (failed_ || ahead_ <= 0 || fd < 0) return;
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0 || std::int64_t(end) + upcoming + ahead_ / 2 <= reserved_end_) return;
  const std::int64_t from = std::max<std::int64_t>(reserved_end_, end);
  const std::int64_t to = std::int64_t(end) + upcoming + ahead_;
  if (::fallocate(fd, FALLOC_FL_KEEP_SIZE, off_t(from), off_t(to - from)) == 0) {
    reserved_end_ = to;
    return;
  }
  // Unsupported, or short of room (which can leave part of the range reserved).
  failed_ = true;
  truncate_to_own_size(fd);
}

void SpaceReservation::release(const std::string& path) {
  if (reserved_end_ == 0 || failed_) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  truncate_to_own_size(fd);
  ::close(fd);
  reserved_end_ = 0;
}

}  // namespace embcache
