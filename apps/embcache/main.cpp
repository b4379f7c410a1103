// embcache: builds the command line, runs one subcommand, maps every error to one line + exit code.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <cstdio>
#include <string>

#include "embcache/cli/inspect_command.hpp"
#include "embcache/cli/precompute_command.hpp"
#include "embcache/cli/run_command.hpp"
#include "embcache/cli/train_probe_command.hpp"
#include "embcache/core/error.hpp"
#include "embcache/pipeline/cancellation.hpp"

int main(int argc, char** argv) {
  embcache::tune_process();
  embcache::install_stop_handlers();
  CLI::App app{"embcache: cache frozen-encoder features once, train probes on them many times"};
  app.require_subcommand(1);
  app.set_version_flag("--version", EMBCACHE_VERSION);
  embcache::setup_precompute(app);
  embcache::setup_train_probe(app);
  embcache::setup_inspect(app);
  embcache::setup_run(app);
  embcache::setup_report(app);
  // A mistyped subcommand would otherwise be reported as "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known = known || sub->check_name(argv[1]);
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "embcache: error: unknown subcommand \"%s\"; choose one of %s (see embcache --help)\n",
                   argv[1], names.c_str());
      return int(embcache::ExitCode::kUsage);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "embcache: error: %s (see embcache --help)\n", e.what());
    return int(embcache::ExitCode::kUsage);
  } catch (const embcache::Interrupted& e) {
    std::fprintf(stderr, "embcache: %s\n", e.what());
    return int(e.code());
  } catch (const embcache::Error& e) {
    std::fprintf(stderr, "embcache: error: %s\n", e.what());
    return int(e.code());
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "embcache: error: %s\n",
                 embcache::first_line(e.what_without_backtrace()).c_str());
    return int(embcache::ExitCode::kInternal);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embcache: error: %s\n", embcache::first_line(e.what()).c_str());
    return int(embcache::ExitCode::kInternal);
  }
  return 0;
}
