#include "embcache/core/stop_request.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace embcache {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int signal) {
  if (g_stop.exchange(true)) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  const char message[] = "\nembcache: stopping after committing finished work (press again to abort)\n";
  if (::write(STDERR_FILENO, message, sizeof message - 1) < 0) {
    // Nothing to do in a signal handler.
  }
}

}  // namespace

void install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

}  // namespace embcache
