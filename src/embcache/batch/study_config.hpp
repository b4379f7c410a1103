// A study file (`embcache run CONFIG.json`): parsed, validated with every problem reported at
// once, and expanded into precompute entries and single probe runs. docs/run.md is the schema.
#pragma once

#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "embcache/pipeline/precompute_options.hpp"
#include "embcache/pipeline/precompute_plan.hpp"
#include "embcache/probe/probe_options.hpp"
#include "embcache/probe/probe_plan.hpp"

namespace embcache {

constexpr int kStudyVersion = 1;

struct PrecomputeEntry {
  std::string name;
  std::int64_t shards = 1;    // "shards": N: N runs of --shard I/N (a Slurm job array of N tasks)
  PrecomputeOptions options;  // paths absolute; out defaults to OUTPUT_DIR/caches/NAME.h5; the run id's text
  PrecomputePlan plan;        // the options as typed values: what the study runs
};

// One point of a probe grid: what one `train-probe` run with scalar lr, head, levels... would do.
struct ProbeRun {
  std::string group;         // the probe entry's name
  std::string name;          // group, plus "field=value" for each field that varies in the group
  std::string id;            // 12 hex digits of SHA-256 over the resolved options and cache identity
  std::string cache_entry;   // the precompute entry it reads, or "" for a cache given by path
  ProbeOptions options;      // caches resolved; out = OUTPUT_DIR/runs/GROUP/SLUG-ID; the run id's text
  ProbePlan plan;            // the options as typed values, its grid one combination
  nlohmann::json varying;    // {"lr": 0.001, "levels": "2"}: the fields that vary in its group
};

// Where the work runs: "executor": "local" (this process) or {"type": "slurm", ...}: sbatch jobs.
struct SlurmSettings {
  std::string partition, time, mem;    // "" = the cluster's defaults
  std::int64_t cpus_per_task = 0;      // 0 = not asked for
  std::int64_t gpus_per_task = 0;
  std::int64_t max_parallel = 0;       // tasks of one array at once (sbatch --array=...%K); 0 = no limit
  std::vector<std::string> sbatch_args;  // passed to sbatch as they are
};

struct Executor {
  enum class Kind { kLocal, kSlurm };
  Kind kind = Kind::kLocal;
  SlurmSettings slurm;
};

struct Study {
  std::string path;          // the config file (absolute)
  int version = kStudyVersion;
  std::string output_dir;    // absolute
  Executor executor;
  std::vector<PrecomputeEntry> precomputes;
  std::vector<std::string> groups;  // probe entry names, in file order
  std::vector<ProbeRun> runs;       // in file order, grids expanded
};

// Throws InputError whose message holds one line per problem ("study.json: probes[0].lr[2]:
// expected a number, got \"fast\""); nothing is run or created.
Study load_study(const std::string& path);

}  // namespace embcache
