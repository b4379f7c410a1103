// embcache: builds the command line, registers the subcommands and runs the one asked for
// (cli/command_line.hpp maps every error to one line and an exit code).
#include <CLI/CLI.hpp>

#include "embcache/cli/command_line.hpp"
#include "embcache/cli/compact_command.hpp"
#include "embcache/cli/inspect_command.hpp"
#include "embcache/cli/precompute_command.hpp"
#include "embcache/cli/run_command.hpp"
#include "embcache/cli/train_probe_command.hpp"
#include "embcache/cli/version_report.hpp"
#include "embcache/core/stop_request.hpp"
#include "embcache/h5/process_settings.hpp"

int main(int argc, char** argv) {
  embcache::tune_process();
  embcache::install_stop_handlers();
  CLI::App app{"embcache: cache frozen-encoder features once, train probes on them many times"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return embcache::version_report(); });
  embcache::setup_precompute(app);
  embcache::setup_train_probe(app);
  embcache::setup_inspect(app);
  embcache::setup_compact(app);
  embcache::setup_run(app);
  embcache::setup_report(app);
  return embcache::run_command_line(app, argc, argv);
}
