#include "embcache/cli/compact_command.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/store/cache_store.hpp"

namespace embcache {

void setup_compact(CLI::App& app) {
  auto options = std::make_shared<CompactOptions>();
  CLI::App* sub = app.add_subcommand(
      "compact", "Rewrite a cache made of parts (shards, incremental runs) into one file; crash-safe, same rows and content id");
  sub->add_option("cache", options->cache, "Cache file")->required();
  sub->add_flag("--no-fsync", [options](std::int64_t) { options->fsync = false; }, "Skip fsync (survives SIGKILL, not power loss)");
  sub->add_flag("--quiet", options->quiet, "No summary line");
  sub->callback([options] { run_compact_command(*options); });
}

void run_compact_command(const CompactOptions& options) {
  if (!std::filesystem::exists(options.cache)) throw InputError(options.cache + ": no such cache file");
  for (const RunState& run : run_states(options.cache)) {
    if (run.active) {
      throw IoError(options.cache + ": a precompute (shard " + run.shard + ") is writing into it; compact it when "
                    "that run ends");
    }
  }
  const CompactStats stats = compact_cache(options.cache, options.fsync);
  if (stats.retired_views_kept > 0) {
    std::fprintf(stderr,
                 "embcache: note: %s: a reader still has the cache open as it was before (%lld older views), so "
                 "the part files it reads stay until it closes it; compact again then to remove them\n",
                 options.cache.c_str(), (long long)stats.retired_views_kept);
  }
  if (options.quiet) return;
  if (stats.parts_before == 0) {
    std::printf("%s: already one file (%lld rows, %s); nothing to do\n", options.cache.c_str(), (long long)stats.rows,
                format_bytes(double(stats.bytes)).c_str());
    return;
  }
  std::printf("%s: %lld parts rewritten into one file: %lld rows, %s, %.1f s\n", options.cache.c_str(),
              (long long)stats.parts_before, (long long)stats.rows, format_bytes(double(stats.bytes)).c_str(), stats.seconds);
}

}  // namespace embcache
