#include "embcache/core/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "embcache/core/parse.hpp"

namespace embcache {

Progress::Progress(std::string label, std::int64_t total, Mode mode)
    : label_(std::move(label)),
      total_(total),
      enabled_(mode != Mode::kQuiet),
      terminal_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::update(std::int64_t done) {
  done_ = done;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const auto interval = terminal_ ? std::chrono::milliseconds(200) : std::chrono::seconds(10);
  if (now - last_draw_ < interval) return;
  last_draw_ = now;
  draw(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_ && terminal_) draw(true);
}

void Progress::draw(bool final_line) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? double(done_) / seconds : 0.0;
  // Nothing done yet: no rate to estimate from.
  const std::string eta = done_ >= total_ ? "0s" : rate > 0 ? format_duration(double(total_ - done_) / rate) : "?";
  const double fraction = total_ > 0 ? double(done_) / double(total_) : 0.0;
  if (terminal_) {
    constexpr int kWidth = 30;
    const int filled = int(fraction * kWidth);
    std::string bar(std::size_t(filled), '#');
    bar.resize(kWidth, '.');
    // \033[K clears what a longer earlier line left to the right.
    std::fprintf(stderr, "\r%s [%s] %lld/%lld %.1f/s ETA %s\033[K", label_.c_str(), bar.c_str(),
                 (long long)done_, (long long)total_, rate, eta.c_str());
    if (final_line) std::fputc('\n', stderr);
  } else {
    std::fprintf(stderr, "%s: %lld/%lld (%.0f%%) %.1f/s ETA %s\n", label_.c_str(),
                 (long long)done_, (long long)total_, 100.0 * fraction, rate, eta.c_str());
  }
  std::fflush(stderr);
}

}  // namespace embcache
