#include "embcache/cli/precompute_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/cli/option_binding.hpp"
#include "embcache/pipeline/precompute.hpp"

namespace embcache {

void setup_precompute(CLI::App& app) {
  auto options = std::make_shared<PrecomputeOptions>();
  CLI::App* sub = app.add_subcommand(
      "precompute", "Run a TorchScript encoder over every crop of a dataset into an HDF5 cache");
  add_option_fields(sub, options, precompute_fields());
  sub->callback([options] { run_precompute_command(*options); });
}

void run_precompute_command(const PrecomputeOptions& options) {
  const PrecomputeSummary summary = run_precompute(plan_precompute(options));
  std::printf("%s\n", summary.one_line().c_str());
  std::fflush(stdout);
  if (!options.summary_json.empty()) {
    write_text_atomically(options.summary_json, summary.to_json().dump(2) + "\n", "--summary-json");
  }
  if (summary.interrupted) {
    throw Interrupted("interrupted: " + std::to_string(summary.crops_computed + summary.crops_skipped) +
                      " of " + std::to_string(summary.crops_total) +
                      " crops are in the cache; rerun the same command to finish");
  }
}

}  // namespace embcache
