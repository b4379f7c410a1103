// `embcache precompute`: command-line options bound to PrecomputeOptions, and the run.
#pragma once

#include "embcache/pipeline/precompute_options.hpp"

namespace CLI {
class App;
}

namespace embcache {

void setup_precompute(CLI::App& app);
// Runs, prints the summary line, writes --summary-json; throws Interrupted after a Ctrl-C.
void run_precompute_command(const PrecomputeOptions& options);

}  // namespace embcache
