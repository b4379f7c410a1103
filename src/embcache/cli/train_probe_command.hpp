// `embcache train-probe`: command-line options bound to ProbeOptions, and the run.
#pragma once

#include "embcache/probe/probe_options.hpp"

namespace CLI {
class App;
}

namespace embcache {

void setup_train_probe(CLI::App& app);
// Trains, writes RUN_DIR, prints the summary line.
void run_train_probe_command(const ProbeOptions& options);

}  // namespace embcache
