#include "embcache/pipeline/cancellation.hpp"

#include <hdf5.h>
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

void tune_process() {
  // HDF5's exit handler closes files still open; after a failed write (disk full) it crashes
  // there. Every file embcache trusts is closed explicitly before use, and files still open at
  // exit are discarded segments, so the handler is not needed.
  H5dont_atexit();
  std::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace embcache
