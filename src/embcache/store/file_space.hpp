// Disk space reserved ahead of buffered writes. On ext4, each page written into a file's new
// space goes through delayed allocation (a reservation, quota and extent-tree updates per
// block), a large share of the writing thread's CPU time in precompute. Space reserved
// beforehand with fallocate is already mapped, so those writes skip that work
// (docs/performance.md, "The output side").
#pragma once

#include <cstdint>
#include <string>

namespace embcache {

// Keeps disk space reserved a bounded distance past the end of one file that grows by
// appending, without changing the file's size or bytes. Best effort: on a filesystem without
// fallocate, or a disk short of room, it gives back what it had reserved and stops; the writes
// then go on as without it.
class SpaceReservation {
 public:
  // `ahead`: bytes kept reserved past the file's end (at most that many are left over).
  explicit SpaceReservation(std::int64_t ahead) : ahead_(ahead) {}
  // Called before `upcoming` bytes are appended: once less than half of `ahead` would remain
  // reserved after them, reserves up to `upcoming` + `ahead` past the file's end.
  void extend(int fd, std::int64_t upcoming = 0);
  // Frees the reservation left past the end of the file at `path` (a truncate to its own size,
  // which changes no byte). Call once the file is closed.
  void release(const std::string& path);
  bool active() const { return reserved_end_ > 0 && !failed_; }

 private:
  std::int64_t ahead_;
  std::int64_t reserved_end_ = 0;
  bool failed_ = false;
};

}  // namespace embcache
