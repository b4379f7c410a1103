// Process-wide stop requests (Ctrl-C, SIGTERM) that long operations poll to stop cleanly.
#pragma once

namespace embcache {

// Installs SIGINT/SIGTERM handlers that request a stop; a second signal exits at once (the
// cache is crash-safe, so that loses only uncommitted work).
void install_stop_handlers();
bool stop_requested();

// Process settings every embcache command wants: HDF5 does not close files at exit (see the
// definition), and writes past a file-size limit fail with EFBIG instead of killing the
// process. Call before any HDF5 use. (The allocator settings for encoders are scoped to the
// encoder's run: encoder/allocator_scope.hpp.)
void tune_process();

}  // namespace embcache
