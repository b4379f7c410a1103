#include "embcache/cli/command_line.hpp"

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
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

// LibTorch's allocators say so in the text of a c10::Error (CPU: "can't allocate memory"; CUDA:
// "out of memory"), and a shape too large to allocate at all in "Storage size calculation".
bool is_out_of_memory(const std::string& message) {
  for (const char* sign : {"can't allocate memory", "out of memory", "Storage size calculation overflowed"}) {
    if (message.find(sign) != std::string::npos) return true;
  }
  return false;
}

int fail(ExitCode code, const std::string& message) {
  std::fprintf(stderr, "embcache: error: %s\n", message.c_str());
  return int(code);
}

// Parses and runs, mapping every error to its exit code.
int parse_and_run(CLI::App& app, int argc, char** argv) {
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
  } catch (const std::bad_alloc&) {
    return fail(ExitCode::kIo, "out of memory: the run asked for more than this machine has; lower --batch-size, or "
                               "a memory budget (--host-memory-budget)");
  } catch (const std::filesystem::filesystem_error& e) {
    // A file-system call that embcache does not check itself (listing a dataset's folders).
    return fail(ExitCode::kIo, e.path1().string() + ": " + e.code().message());
  } catch (const c10::Error& e) {
    const std::string message = first_line(e.what_without_backtrace());
    if (is_out_of_memory(message)) {
      return fail(ExitCode::kIo, "out of memory: " + message + "; lower --batch-size, or a memory budget");
    }
    return fail(ExitCode::kInternal, message);
  } catch (const std::exception& e) {
    return fail(ExitCode::kInternal, first_line(e.what()));
  }
  return 0;
}

}  // namespace

int run_command_line(CLI::App& app, int argc, char** argv) {
  const int code = parse_and_run(app, argc, argv);
  if (code != 0) return code;
  // A summary, table or help text that did not reach standard output (a full disk behind a
  // redirection) is a failed run, not a quiet success.
  const int flush_error = std::fflush(stdout) == 0 ? 0 : errno;
  if (flush_error != 0 || std::ferror(stdout)) {
    return fail(ExitCode::kIo, std::string("cannot write to standard output: ") +
                                   (flush_error != 0 ? std::strerror(flush_error) : "a write failed"));
  }
  return 0;
}

}  // namespace embcache
