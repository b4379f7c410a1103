// `embcache report`: one self-contained HTML file (inline SVG, no network) with the results
// table, learning curves, metric vs learning rate and a comparison of levels.
#pragma once

#include <string>

namespace embcache {

// Reads OUTPUT_DIR/results.jsonl and each run's metrics.json; writes OUTPUT_DIR/report.html and
// returns its path. InputError when the directory holds no results.
std::string write_report(const std::string& output_dir);

}  // namespace embcache
