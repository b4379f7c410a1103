// Running another program and reading what it prints: sbatch, squeue and scancel for the Slurm
// executor (batch/slurm_executor.hpp).
#pragma once

#include <string>
#include <vector>

namespace embcache {

struct CommandResult {
  int exit_code = -1;    // the program's exit status; 127 when it could not be started
  std::string output;    // its stdout, then (merged) its stderr
};

// Runs argv[0] (looked up on PATH) with the arguments, waits, and returns what it printed.
// Never throws for the program's own failure: the caller reads exit_code.
CommandResult run_command(const std::vector<std::string>& argv);

// Whether `name` is an executable file on PATH.
bool on_path(const std::string& name);

}  // namespace embcache
