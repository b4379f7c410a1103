#include "embcache/cli/command_line.hpp"

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "embcache/core/error.hpp"

namespace embcache {
namespace {

// A first argument that names no subcommand: CLI11 would say "A subcommand is required".
std::optional<std::string> unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(argv[1])) return std::nullopt;
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return "unknown subcommand \"" + std::string(argv[1]) + "\"; choose one of " + names + " (see embcache --help)";
}

// CLI11 checks required options before unknown ones, so a mistyped flag (--learning-rate) would
// be reported as a missing option it has nothing to do with: the first unknown option, in
// command-line order (an option rather than the value after it; --name=value: the name).
std::string first_unknown_option(const CLI::App& app, int argc, char** argv) {
  const std::vector<std::string> unknown = app.remaining(true);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg[0] == '-' && std::find(unknown.begin(), unknown.end(), arg) != unknown.end()) {
      return arg.substr(0, arg.find('='));
    }
  }
  return "";
}

int fail(ExitCode code, const std::string& message) {
  std::fprintf(stderr, "embcache: error: %s\n", message.c_str());
  return int(code);
}

}  // namespace

int run_command_line(CLI::App& app, int argc, char** argv) {
  if (const auto message = unknown_subcommand(app, argc, argv)) return fail(ExitCode::kUsage, *message);
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
    const std::string unknown = first_unknown_option(app, argc, argv);
    if (!unknown.empty()) return fail(ExitCode::kUsage, "unknown option " + unknown + " (see " + help + ")");
    return fail(ExitCode::kUsage, std::string(e.what()) + " (see " + help + ")");
  } catch (const CLI::ParseError& e) {
    return fail(ExitCode::kUsage, std::string(e.what()) + " (see " + help + ")");
  } catch (const Interrupted& e) {
    std::fprintf(stderr, "embcache: %s\n", e.what());
    return int(e.code());
  } catch (const Error& e) {
    return fail(e.code(), e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    // A file-system call that embcache does not check itself (listing a dataset's folders).
    return fail(ExitCode::kIo, e.path1().string() + ": " + e.code().message());
  } catch (const c10::Error& e) {
    return fail(ExitCode::kInternal, first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return fail(ExitCode::kInternal, first_line(e.what()));
  }
  return 0;
}

}  // namespace embcache
