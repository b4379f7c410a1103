// embcache: builds the command line, runs one subcommand, maps every error to one line + exit code.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "embcache/cli/inspect_command.hpp"
#include "embcache/cli/precompute_command.hpp"
#include "embcache/core/error.hpp"
#include "embcache/pipeline/cancellation.hpp"

namespace {

// libgomp reads OMP_WAIT_POLICY once, when it is loaded. Its default keeps idle OpenMP workers
// spinning, which takes the cores the pipeline's other stages need; passive waiting measured
// 10-15% faster end to end for CPU encoders on 2 cores. Since it cannot be changed after
// loading, `precompute` re-executes itself once with it set (unless the user set it).
void reexec_with_passive_openmp(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "precompute") != 0) return;
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the default policy.
}

}  // namespace

int main(int argc, char** argv) {
  reexec_with_passive_openmp(argc, argv);
  embcache::tune_process();
  embcache::install_stop_handlers();
  CLI::App app{"embcache: cache frozen-encoder features once, train probes on them many times"};
  app.require_subcommand(1);
  app.set_version_flag("--version", EMBCACHE_VERSION);
  embcache::setup_precompute(app);
  embcache::setup_inspect(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "embcache: error: %s (see embcache --help)\n", e.what());
    return int(embcache::ExitCode::kUsage);
  } catch (const embcache::Interrupted& e) {
    std::fprintf(stderr, "embcache: %s\n", e.what());
    return int(e.code());
  } catch (const embcache::Error& e) {
    std::fprintf(stderr, "embcache: error: %s\n", e.what());
    return int(e.code());
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "embcache: error: %s\n",
                 embcache::first_line(e.what_without_backtrace()).c_str());
    return int(embcache::ExitCode::kInternal);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embcache: error: %s\n", embcache::first_line(e.what()).c_str());
    return int(embcache::ExitCode::kInternal);
  }
  return 0;
}
