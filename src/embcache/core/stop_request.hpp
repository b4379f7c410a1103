// Process-wide stop requests (Ctrl-C, SIGTERM) that long operations poll to stop cleanly.
#pragma once

namespace embcache {

// Installs SIGINT/SIGTERM handlers that request a stop; a second signal exits at once (the
// cache is crash-safe, so that loses only uncommitted work).
void install_stop_handlers();
bool stop_requested();

}  // namespace embcache
