// `embcache run CONFIG.json` and `embcache report OUTPUT_DIR`.
#pragma once

namespace CLI {
class App;
}

namespace embcache {

void setup_run(CLI::App& app);
void setup_report(CLI::App& app);

}  // namespace embcache
