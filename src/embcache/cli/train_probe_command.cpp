#include "embcache/cli/train_probe_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "embcache/cli/option_binding.hpp"
#include "embcache/probe/trainer.hpp"

namespace embcache {

void setup_train_probe(CLI::App& app) {
  auto o = std::make_shared<ProbeOptions>();
  CLI::App* sub = app.add_subcommand("train-probe", "Train probe heads on cached features; report metrics, curves and the best head");
  add_option_fields(sub, o, probe_fields());
  sub->callback([o] { run_train_probe_command(*o); });
}

void run_train_probe_command(const ProbeOptions& options) {
  const ProbeResult result = train_probe(plan_probe(options));
  std::printf("%s\n", result.summary.c_str());
  std::fflush(stdout);
}

}  // namespace embcache
