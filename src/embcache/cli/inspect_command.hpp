// `embcache inspect`: what a cache holds (format, signature, splits, levels, labels).
#pragma once

#include <nlohmann/json.hpp>
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
nlohmann::json inspect_cache(const std::string& path);
void run_inspect_command(const InspectOptions& options);

}  // namespace embcache
