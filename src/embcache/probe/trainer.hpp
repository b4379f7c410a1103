// `train-probe`: trains every requested head combination over one pass of the cached features
// per epoch, picks the best by validation, evaluates on test and writes RUN_DIR.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "embcache/probe/probe_options.hpp"

namespace embcache {

struct ProbeResult {
  nlohmann::json metrics;  // what RUN_DIR/metrics.json holds
  std::string summary;     // the one line printed on stdout
};

// Writes RUN_DIR/metrics.json, history.csv and head.pt. Throws UsageError/InputError/IoError
// with one line; Interrupted after Ctrl-C (nothing is written then).
ProbeResult train_probe(const ProbeOptions& options);

}  // namespace embcache
