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
  // Throws IoError "<busy> (process PID holds <path>)" when another process holds the lock (still
  // held after about 0.1 s: a reader's probe is waited out), and "cannot create <path>: <reason>;
  // <unwritable>" when the file cannot be created.
  FileLock(std::string path, const std::string& busy, const std::string& unwritable);
  // Waits while another process holds it (the install lock of a cache, held for seconds);
  // `on_wait` runs once, before the first wait, to say so.
  struct Wait {
    std::string unwritable;
    void (*on_wait)(const std::string& path, const std::string& holder) = nullptr;
  };
  FileLock(std::string path, const Wait& wait);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  // Opens and locks path_ (blocking or not); false when busy (non-blocking only).
  bool acquire(bool blocking, const std::string& unwritable, const Wait* wait);

  std::string path_;
  int fd_ = -1;
};

// Whether a live process holds the lock on `path` now (a lock file left by a process that died
// is not held). Probes with a shared lock, released at once.
bool file_lock_is_held(const std::string& path);

}  // namespace embcache
