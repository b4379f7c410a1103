#include "embcache/store/file_space.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace embcache {

namespace {

void truncate_to_own_size(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    // ext4 and XFS drop blocks reserved past the end even when the size does not change.
    [[maybe_unused]] const int rc = ::ftruncate(fd, st.st_size);
  }
}

}  // namespace

bool reserve_file_space(int fd, std::int64_t bytes) {
  if (bytes <= 0) return false;
  if (::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, off_t(bytes)) == 0) return true;
  // A refusal for room can leave part of the range reserved.
  truncate_to_own_size(fd);
  return false;
}

void release_unused_file_space(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  truncate_to_own_size(fd);
  ::close(fd);
}

}  // namespace embcache
