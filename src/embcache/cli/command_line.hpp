// Running the command line: CLI11 parses it into a subcommand that runs, and every error becomes
// one line on stderr with its exit code (core/error.hpp). CLI11's own messages are repaired here
// where they would mislead: a mistyped subcommand, or a mistyped option that CLI11 reports as a
// missing required one.
#pragma once

namespace CLI {
class App;
}

namespace embcache {

// Parses argv with `app` (its subcommands registered) and runs the chosen one; returns the
// process's exit code. Never throws.
int run_command_line(CLI::App& app, int argc, char** argv);

}  // namespace embcache
