// embcache: builds the command line, runs one subcommand, maps every error to one line + exit code.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "embcache/cli/compact_command.hpp"
#include "embcache/cli/inspect_command.hpp"
#include "embcache/cli/precompute_command.hpp"
#include "embcache/cli/run_command.hpp"
#include "embcache/cli/train_probe_command.hpp"
#include "embcache/cli/version_report.hpp"
#include "embcache/core/error.hpp"
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
  // Usage errors point at the subcommand's own help.
  const std::string help = argc > 1 && argv[1][0] != '-' ? std::string("embcache ") + argv[1] + " --help" : "embcache --help";
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RequiredError& e) {
    // CLI11 checks required options before unknown ones, so a mistyped flag (--learning-rate)
    // would be reported as a missing option it has nothing to do with: name it first.
    const std::vector<std::string> unknown = app.remaining(true);
    std::string first;  // in command-line order; an option rather than the value after it
    for (int i = 1; i < argc && first.empty(); ++i) {
      const std::string arg = argv[i];
      if (arg[0] == '-' && std::find(unknown.begin(), unknown.end(), arg) != unknown.end()) {
        first = arg.substr(0, arg.find('='));  // --name=value: the name
      }
    }
    if (!first.empty()) {
      std::fprintf(stderr, "embcache: error: unknown option %s (see %s)\n", first.c_str(), help.c_str());
    } else {
      std::fprintf(stderr, "embcache: error: %s (see %s)\n", e.what(), help.c_str());
    }
    return int(embcache::ExitCode::kUsage);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "embcache: error: %s (see %s)\n", e.what(), help.c_str());
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
