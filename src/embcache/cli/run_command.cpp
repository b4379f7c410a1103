#include "embcache/cli/run_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "embcache/batch/report.hpp"
#include "embcache/batch/study_runner.hpp"

namespace embcache {

void setup_run(CLI::App& app) {
  auto o = std::make_shared<RunStudyOptions>();
  CLI::App* sub = app.add_subcommand("run", "Run a study from a JSON config: precomputes, probe grids, results table, report");
  sub->add_option("config", o->config, "Study config (docs/run.md)")->required();
  sub->add_flag("--dry-run", o->dry_run, "Print the plan (caches, runs, how they fuse) and run nothing");
  sub->add_flag("--force", o->force, "Rerun runs the ledger records as finished");
  sub->add_option("--only", o->only, "Run only these entries (precompute or probe names; repeat or comma list)")->delimiter(',');
  sub->add_flag("--detach", o->detach, "Slurm executor: submit the jobs and return; a later `embcache run` collects them");
  sub->add_option("--task", o->task, "What a Slurm job of the study runs (precompute=NAME or pass=IDS); set by the "
                  "executor's job scripts")->group("");
  sub->callback([o] { run_study(*o); });
}

void setup_report(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("report", "Write OUTPUT_DIR/report.html from a study's results");
  sub->add_option("output_dir", *dir, "The study's output_dir")->required();
  sub->callback([dir] {
    const std::string path = write_report(*dir);
    std::printf("report: %s\n", path.c_str());
  });
}

}  // namespace embcache
