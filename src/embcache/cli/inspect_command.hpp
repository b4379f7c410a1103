// `embcache inspect`: what a cache holds (format, signature, splits, levels, labels).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace embcache {

struct InspectOptions {
  std::string cache;
  bool json = false;
};

void setup_inspect(CLI::App& app);
void run_inspect_command(const InspectOptions& options);

}  // namespace embcache
