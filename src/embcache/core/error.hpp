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
  kIo = 4,           // the file system or HDF5 failed (disk full, permissions)
  kInterrupted = 130 // Ctrl-C: everything finished so far is committed
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Invalid options or option combinations: the user fixes the command line.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(ExitCode::kUsage, message) {}
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

// First line of a message, for third-party exceptions (c10::Error) that append backtraces.
std::string first_line(const std::string& text);

}  // namespace embcache
