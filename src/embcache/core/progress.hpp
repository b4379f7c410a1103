// Progress on stderr: a redrawn bar on a terminal, periodic plain lines otherwise, or nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace embcache {

class Progress {
 public:
  enum class Mode { kAuto, kQuiet };
  Progress(std::string label, std::int64_t total, Mode mode);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Report `done` units so far; cheap enough to call per batch.
  void update(std::int64_t done);
  void finish();

 private:
  void draw(bool final_line);
  std::string label_;
  std::int64_t total_;
  std::int64_t done_ = 0;
  bool enabled_;
  bool terminal_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace embcache
