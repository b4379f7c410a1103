// `embcache compact CACHE.h5`: rewrites a cache of parts into one file (part_installer.hpp).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace embcache {

struct CompactOptions {
  std::string cache;
  bool fsync = true;
  bool quiet = false;
};

void setup_compact(CLI::App& app);
void run_compact_command(const CompactOptions& options);

}  // namespace embcache
