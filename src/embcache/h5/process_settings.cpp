#include "embcache/h5/process_settings.hpp"

#include <hdf5.h>

#include <csignal>

#include "embcache/host/sanitizer_tensor_pool.hpp"

namespace embcache {

void tune_process() {
  // HDF5's exit handler closes files still open; after a failed write (disk full) it crashes
  // there. Every file embcache trusts is closed explicitly before use, and files still open at
  // exit are discarded segments, so the handler is not needed.
  H5dont_atexit();
  std::signal(SIGXFSZ, SIG_IGN);
  install_sanitizer_tensor_pool();
}

}  // namespace embcache
