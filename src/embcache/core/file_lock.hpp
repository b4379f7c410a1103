// An exclusive, advisory lock on a file, held for the object's lifetime: one writer per cache,
// one `embcache run` per study output_dir.
#pragma once

#include <string>

namespace embcache {

// An flock on `path` (created if needed; it holds the owner's pid, for the error message of the
// next process). The kernel drops the lock when the process dies, so a crashed owner never
// blocks the next run; the destructor removes the file.
class FileLock {
 public:
  // Throws IoError "<busy> (process PID holds <path>)" when another process holds the lock,
  // and "cannot create <path>: <reason>; <unwritable>" when the file cannot be created.
  FileLock(std::string path, const std::string& busy, const std::string& unwritable);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace embcache
