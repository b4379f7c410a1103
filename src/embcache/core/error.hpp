// Errors that end an operation; each carries the exit code the CLI returns for it.
#pragma once

#include <stdexcept>
#include <string>

namespace embcache {

enum class ExitCode : int {
  kOk = 0,
  kInternal = 1,     // a bug: an invariant broke
  kUsage = 2,        // bad command line or option values
  kInput = 3,        // bad dataset, encoder or cache content
  kIo = 4,           // the file system or HDF5 failed (disk full, permissions), or memory ran out
  kInterrupted = 130 // Ctrl-C: everything finished so far is committed
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// The option a UsageError is about, by its long name without dashes ("crop-size").
struct OptionName {
  std::string key;
};

// Invalid options or option combinations: the user fixes the command line or the study field.
// Always about one option: reads "--KEY: DETAIL" on the command line, and a study names its field
// ("probes[2].lr: DETAIL") from option() and detail(), without taking the message apart.
class UsageError : public Error {
 public:
  UsageError(OptionName option, const std::string& detail)
      : Error(ExitCode::kUsage, "--" + option.key + ": " + detail), option_(std::move(option.key)), detail_(detail) {}
  const std::string& option() const { return option_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string option_;
  std::string detail_;
};

// The content of a dataset, encoder or cache is wrong: the user fixes the file.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(ExitCode::kInput, message) {}
};

// Reading or writing failed at the file-system level.
class IoError : public Error {
 public:
  explicit IoError(const std::string& message) : Error(ExitCode::kIo, message) {}
};

// The user asked to stop (SIGINT/SIGTERM); committed work is kept.
class Interrupted : public Error {
 public:
  explicit Interrupted(const std::string& message) : Error(ExitCode::kInterrupted, message) {}
};

// First line with text of a message, for third-party exceptions (c10::Error) that append
// backtraces or, like TorchScript's compiler, open with an empty line.
std::string first_line(const std::string& text);

}  // namespace embcache
