#include "embcache/core/shard_spec.hpp"

#include <cstdlib>

#include "embcache/core/error.hpp"
#include "embcache/core/limits.hpp"

namespace embcache {
namespace {

// A non-negative integer of the whole text, or -1.
std::int64_t whole_number(const std::string& text) {
  if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(text);
}

std::int64_t slurm_variable(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) {
    throw UsageError(OptionName{"shard"}, std::string("slurm: ") + name +
                     " is not set; --shard slurm is for tasks of a Slurm job array (sbatch --array=0-N), "
                     "elsewhere give --shard I/N");
  }
  const std::int64_t n = whole_number(value);
  if (n < 0) throw UsageError(OptionName{"shard"}, std::string("slurm: ") + name + "=" + value + " is not a number");
  return n;
}

ShardSpec from_slurm() {
  const std::int64_t id = slurm_variable("SLURM_ARRAY_TASK_ID");
  const std::int64_t min = slurm_variable("SLURM_ARRAY_TASK_MIN");
  const std::int64_t count = slurm_variable("SLURM_ARRAY_TASK_COUNT");
  if (count < 1 || id < min || id - min >= count) {
    throw UsageError(OptionName{"shard"}, "slurm: task " + std::to_string(id) + " of an array from " + std::to_string(min) +
                     " with " + std::to_string(count) + " tasks is not one of shards 0-" + std::to_string(count - 1) +
                     "; submit the array as --array=0-" + std::to_string(count > 0 ? count - 1 : 0) +
                     " (a contiguous range)");
  }
  return {id - min, count};
}

}  // namespace

ShardSpec parse_shard(const std::string& text) {
  if (text.empty()) return {};
  if (text == "slurm") return from_slurm();
  const auto slash = text.find('/');
  const std::int64_t index = slash == std::string::npos ? -1 : whole_number(text.substr(0, slash));
  const std::int64_t count = slash == std::string::npos ? -1 : whole_number(text.substr(slash + 1));
  if (index < 0 || count < 1 || count > kMaxShards) {
    throw UsageError(OptionName{"shard"}, "expected I/N (shard I of N, counted from 0, N at most " +
                     std::to_string(kMaxShards) + ") or slurm, got \"" + text + "\"");
  }
  if (index >= count) {
    throw UsageError(OptionName{"shard"}, text + ": shards of " + std::to_string(count) + " are numbered 0 to " +
                     std::to_string(count - 1));
  }
  return {index, count};
}

ShardSpec shard_from_text(const std::string& text) {
  const auto slash = text.find('/');
  if (slash == std::string::npos) return {};
  const std::int64_t index = whole_number(text.substr(0, slash));
  const std::int64_t count = whole_number(text.substr(slash + 1));
  if (index < 0 || count < 1 || index >= count) return {};
  return {index, count};
}

}  // namespace embcache
