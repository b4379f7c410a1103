// Study configs alone: grid expansion, validation messages, precision, and fusion into passes.
#include "doctest_torch.hpp"

#include <fstream>
#include <set>
#include <string>

#include "embcache/batch/pass_fusion.hpp"
#include "embcache/batch/study_config.hpp"
#include "embcache/core/error.hpp"
#include "test_support.hpp"

using namespace embcache;

namespace {

// A study directory with dummy encoder and dataset files (parsing checks only that they exist).
struct StudyDir {
  testing::TempDir dir;
  StudyDir() {
    std::ofstream(dir.file("enc.pt")) << "x";
    std::ofstream(dir.file("data.h5")) << "x";
  }
  // `top_extra` adds top-level keys (", \"executor\": ...").
  Study load(const std::string& probes, const std::string& precompute_extra = "", const std::string& top_extra = "") const {
    const std::string path = dir.file("study.json");
    std::ofstream(path) << R"({"version": 1, "output_dir": "out")" + top_extra + R"(,
      "precompute": [{"name": "enc", "encoder": "enc.pt", "dataset": "data.h5")" + precompute_extra + R"(}],
      "probes": [)" + probes + "]}";
    return load_study(path);
  }
  std::string problems(const std::string& probes) const {
    try {
      load(probes);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_SUITE("batch") {

TEST_CASE("a probe entry expands into one run per grid point, each with its typed combination") {
  StudyDir d;
  const Study study = d.load(R"({"name": "sweep", "cache": "enc", "task": "classification",
                                 "levels": [[0], [1, 2]], "lr": [1e-3, 0.01], "weight_decay": 1e-4})");
  REQUIRE(study.runs.size() == 4);
  const char* names[] = {"sweep/levels=0,lr=0.001", "sweep/levels=0,lr=0.01", "sweep/levels=1+2,lr=0.001",
                         "sweep/levels=1+2,lr=0.01"};
  for (std::size_t i = 0; i < 4; ++i) {
    const ProbeRun& run = study.runs[i];
    REQUIRE(run.name == names[i]);
    REQUIRE(run.id.size() == 12);
    REQUIRE(run.plan.grid.size() == 1);
    REQUIRE(run.plan.grid[0].lr == (i % 2 == 0 ? 1e-3 : 0.01));
    REQUIRE(run.plan.grid[0].weight_decay == 1e-4);
    REQUIRE(run.plan.grid[0].levels_text() == (i < 2 ? "0" : "1+2"));
    REQUIRE(run.plan.options.out == run.options.out);
    REQUIRE(run.cache_entry == "enc");
  }
  REQUIRE(study.runs[0].id != study.runs[1].id);
}

TEST_CASE("a study's numbers reach the plans with every digit") {
  StudyDir d;
  const Study study = d.load(R"({"name": "p", "cache": "enc", "task": "classification", "levels": 0,
                                 "lr": 0.0012345678901})",
                             R"(, "mean": [1370.19151926, 0.5], "std": [2.5, 1], "scale": 0.0001)");
  const PrecomputePlan& plan = study.precomputes.front().plan;
  REQUIRE(plan.preprocess.mean == std::vector<double>{1370.19151926, 0.5});
  REQUIRE(plan.preprocess.std == std::vector<double>{2.5, 1.0});
  REQUIRE(plan.preprocess.scale == 0.0001);
  REQUIRE(study.precomputes.front().options.mean == "1370.19151926,0.5");
  REQUIRE(study.runs.front().plan.grid[0].lr == 0.0012345678901);
}

TEST_CASE("validation names each problem's place, all at once") {
  StudyDir d;
  const std::string problems = d.problems(
      R"({"name": "a", "cache": "enc", "task": "classification", "levels": 0, "learning_rate": 0.1},
         {"name": "b", "cache": "enc", "task": "classification", "levels": 0, "zip": ["lr", "weight_decay"],
          "lr": [0.1, 0.01], "weight_decay": [0]},
         {"name": "c", "cache": "enc", "task": "classification", "levels": 0, "lr": []},
         {"name": "d", "cache": "enc", "task": "classification", "levels": 0, "lr": [0.1, "fast"]})");
  REQUIRE(contains(problems, "4 problems in"));
  REQUIRE(contains(problems, R"(probes[0].learning_rate: unknown key "learning_rate"; did you mean "lr"?)"));
  REQUIRE(contains(problems, "probes[1].weight_decay: has 1 values but the other \"zip\" fields have 2"));
  REQUIRE(contains(problems, "probes[2].lr: empty list: no runs"));
  REQUIRE(contains(problems, R"(probes[3].lr[1]: expected a number, got "fast")"));
}

TEST_CASE("values past the fixed limits, numbers that do not fit, repeated keys and names of no folder are refused") {
  StudyDir d;
  const std::string limits = d.problems(
      R"({"name": "a", "cache": "enc", "task": "classification", "levels": 0, "epochs": 2147483648},
         {"name": "b", "cache": "enc", "task": "classification", "levels": 0, "threads": 10000000000},
         {"name": "c", "cache": "enc", "task": "classification", "levels": 0, "threads": -2},
         {"name": "..", "cache": "enc", "task": "classification", "levels": 0})");
  CHECK(contains(limits, "probes[0].epochs: expected epochs from 1 to 100000, got 2147483648"));
  CHECK(contains(limits, "probes[1].threads: expected a whole number from -2147483648 to 2147483647, got 10000000000"));
  CHECK(contains(limits, "probes[2].threads: expected 0 (LibTorch's default) or a thread count from 0 to 4096, got -2"));
  CHECK(contains(limits, R"(probes[3].name: ".." must not be . or .. nor contain / or \: it names a folder)"));
  std::string shards;
  try {
    d.load(R"({"name": "p", "cache": "enc", "task": "classification", "levels": 0})", R"(, "shards": 1000000)");
  } catch (const InputError& e) {
    shards = e.what();
  }
  CHECK(contains(shards, "precompute[0].shards: expected a whole number from 1 to 100000"));

  const std::string path = d.dir.file("raw.json");
  const auto refusal = [&](const std::string& text) {
    std::ofstream(path) << text;
    try {
      load_study(path);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refusal(R"({"version": 1, "output_dir": "out", "probes": [], "output_dir": "elsewhere"})") ==
        path + R"(: "output_dir" is given twice in the object under "the top level"; give each key once)");
  CHECK(contains(refusal(R"({"version": 1, "probes": [{"name": "a", "lr": 0.1, "lr": 0.2}]})"),
                 R"("lr" is given twice in the object under "probes")"));
  const std::string overflow = refusal(R"({"version": 1, "output_dir": "out", "probes": [{"lr": 1e999}]})");
  CHECK(contains(overflow, path + ": malformed JSON: number overflow"));
  CHECK(overflow.find('\n') == std::string::npos);
}

TEST_CASE("a grid past 100000 runs is refused, also where the product of its lists would wrap") {
  StudyDir d;
  // Four lists of 2^16 values: 2^64 runs, a product that wraps to 0 in 64 bits.
  const auto list = [](const char* key, double scale, double offset) {
    std::string text = std::string("\"") + key + "\": [";
    for (int i = 0; i < 65536; ++i) text += (i ? "," : "") + std::to_string(offset + i * scale);
    return text + "]";
  };
  const std::string problems = d.problems(R"({"name": "a", "cache": "enc", "task": "classification", "levels": 0, )" +
                                          list("lr", 1e-6, 1e-6) + ", " + list("weight_decay", 1e-6, 0) + ", " +
                                          list("seed", 1, 0) + ", " + list("dropout", 1.0 / 65536, 0) + "}");
  CHECK(contains(problems, "probes[0]: expands into more than 100000 runs"));
}

TEST_CASE("an executor object fills the Slurm settings, and each wrong key is named") {
  StudyDir d;
  const std::string probe = R"({"name": "p", "cache": "enc", "task": "classification", "levels": 0})";
  const Study study = d.load(probe, "", R"(, "executor": {"type": "slurm", "partition": "gpu", "time": "02:00:00",
      "mem": "32G", "cpus_per_task": 4, "gpus_per_task": 1, "max_parallel": 3, "sbatch_args": ["--qos=high"]})");
  REQUIRE(study.executor.kind == Executor::Kind::kSlurm);
  const SlurmSettings& s = study.executor.slurm;
  REQUIRE(s.partition == "gpu");
  REQUIRE(s.time == "02:00:00");
  REQUIRE(s.mem == "32G");
  REQUIRE(s.cpus_per_task == 4);
  REQUIRE(s.gpus_per_task == 1);
  REQUIRE(s.max_parallel == 3);
  REQUIRE(s.sbatch_args == std::vector<std::string>{"--qos=high"});
  REQUIRE(d.load(probe, "", R"(, "executor": "local")").executor.kind == Executor::Kind::kLocal);

  std::string problems;
  try {
    d.load(probe, "", R"(, "executor": {"type": "slurm", "partition": "", "max_parallel": -1,
        "sbatch_args": "--qos=high", "gpu_per_task": 1})");
  } catch (const InputError& e) {
    problems = e.what();
  }
  REQUIRE(contains(problems, "executor.partition: expected a string as sbatch takes it"));
  REQUIRE(contains(problems, "executor.max_parallel: expected a whole number >= 0, got -1"));
  REQUIRE(contains(problems, "executor.sbatch_args: expected a list of strings"));
  REQUIRE(contains(problems, "executor: unknown key \"gpu_per_task\"; did you mean \"gpus_per_task\"?"));
}

TEST_CASE("a UsageError names its option; a study turns that into the field, the CLI into the flag") {
  const UsageError about_lr(OptionName{"warmup-epochs"}, "30 is not shorter than --epochs 20");
  REQUIRE(std::string(about_lr.what()) == "--warmup-epochs: 30 is not shorter than --epochs 20");
  REQUIRE(about_lr.option() == "warmup-epochs");
  REQUIRE(about_lr.detail() == "30 is not shorter than --epochs 20");
  StudyDir d;
  std::string problems;
  try {
    d.load(R"({"name": "p", "cache": "enc", "task": "classification", "levels": 0, "lr": [0.1, 0.01],
               "warmup_epochs": 30})",
           R"(, "crop_size": "14x")");
  } catch (const InputError& e) {
    problems = e.what();
  }
  REQUIRE(contains(problems, R"(precompute[0].crop_size: expected S or WxH (64 or 64x32), got "14x")"));
  REQUIRE(contains(problems, "probes[0].warmup_epochs (lr=0.1): 30 is not shorter than --epochs 20"));
}

TEST_CASE("fusion: a full grid is one pass whose grid lists the runs in order; a zip goes by head and levels") {
  StudyDir d;
  const Study study = d.load(
      R"({"name": "grid", "cache": "enc", "task": "classification", "levels": [[0], [1]], "lr": [1e-3, 1e-2]},
         {"name": "zipped", "cache": "enc", "task": "classification", "head": "mlp", "levels": 1,
          "zip": ["lr", "weight_decay"], "lr": [1e-3, 1e-2], "weight_decay": [0, 0.01]})");
  REQUIRE(study.runs.size() == 6);
  const std::vector<Pass> grid = fuse_runs(study, {0, 1, 2, 3});
  REQUIRE(grid.size() == 1);
  REQUIRE(grid[0].runs == std::vector<std::size_t>{0, 1, 2, 3});
  REQUIRE(grid[0].plan.grid.size() == 4);
  for (std::size_t k = 0; k < 4; ++k) {
    REQUIRE(grid[0].plan.grid[k].lr == study.runs[k].plan.grid[0].lr);
    REQUIRE(grid[0].plan.grid[k].levels == study.runs[k].plan.grid[0].levels);
  }
  REQUIRE(contains(grid[0].plan.options.out, "/passes/"));
  // Zipped (lr, wd) pairs are 2 of a 2x2 grid: each run trains alone.
  REQUIRE(fuse_runs(study, {4, 5}).size() == 2);
  // Runs of two entries never share a pass; a finished run leaves the rest of its grid to fuse by level.
  REQUIRE(fuse_runs(study, {0, 1, 2, 3, 4, 5}).size() == 3);
  const std::vector<Pass> partial = fuse_runs(study, {0, 2, 3});
  REQUIRE(partial.size() == 2);
  REQUIRE(partial[0].runs == std::vector<std::size_t>{0});
  REQUIRE(partial[1].runs == std::vector<std::size_t>{2, 3});
}

TEST_CASE("seeds and fractions: \"seeds\" is a seed grid; runs differing in seed or fraction fuse into one pass") {
  StudyDir d;
  const Study study = d.load(R"({"name": "p", "cache": "enc", "task": "classification", "levels": 1, "lr": 1e-2,
                                 "seeds": [0, 1, 2], "train_fraction": [0.1, 1]})");
  REQUIRE(study.runs.size() == 6);
  std::set<std::pair<std::uint64_t, double>> points;
  for (const auto& run : study.runs) {
    REQUIRE(run.options.seeds.empty());  // each run has one seed, as "seed" would give it
    points.insert({run.plan.grid[0].seed, run.plan.grid[0].train_fraction});
    REQUIRE(run.varying.contains("seed"));
  }
  REQUIRE(points.size() == 6);
  // "seeds" names the same runs as "seed": the same ids.
  const Study same = d.load(R"({"name": "p", "cache": "enc", "task": "classification", "levels": 1, "lr": 1e-2,
                                "seed": [0, 1, 2], "train_fraction": [0.1, 1]})");
  std::set<std::string> ids, same_ids;
  for (std::size_t i = 0; i < 6; ++i) ids.insert(study.runs[i].id), same_ids.insert(same.runs[i].id);
  REQUIRE(ids == same_ids);
  REQUIRE(study.runs[1].plan.grid[0].seed == 1);  // "seeds" vary fastest, as --seeds does
  const std::vector<Pass> passes = fuse_runs(study, {0, 1, 2, 3, 4, 5});
  REQUIRE(passes.size() == 1);
  REQUIRE(grid_seed_count(passes[0].plan.grid) == 3);
  REQUIRE(passes[0].plan.grid[5].train_fraction == study.runs[5].plan.grid[0].train_fraction);
  // A run at the default fraction and seed keeps the id it had before these options existed.
  const Study plain = d.load(R"({"name": "p", "cache": "enc", "task": "classification", "levels": 1, "lr": 1e-2})");
  const Study explicit_default = d.load(R"({"name": "p", "cache": "enc", "task": "classification", "levels": 1,
                                            "lr": 1e-2, "train_fraction": 1, "seed_mode": "full"})");
  REQUIRE(plain.runs[0].id == explicit_default.runs[0].id);
  CHECK(contains(d.problems(R"({"name": "p", "cache": "enc", "task": "classification", "levels": 1,
                               "seed": 1, "seeds": [0, 1]})"),
                 "probes[0].seeds: give \"seed\" or \"seeds\", not both"));
  CHECK(contains(d.problems(R"({"name": "p", "cache": "enc", "task": "classification", "levels": 1, "seeds": 3})"),
                 "probes[0].seeds: expected a list of seeds, e.g. [0, 1, 2]"));
}

}  // TEST_SUITE
