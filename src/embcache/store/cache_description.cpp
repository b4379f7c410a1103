#include "embcache/store/cache_description.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "embcache/core/error.hpp"
#include "embcache/core/shard_spec.hpp"
#include "embcache/store/cache_reader.hpp"
#include "embcache/store/cache_schema.hpp"
#include "embcache/store/cache_store.hpp"

namespace fs = std::filesystem;

namespace embcache {
namespace {

// The parts of a view (empty for a cache of one file): file, rows shown, shard, provenance.
nlohmann::json describe_parts(const CacheReader& reader) {
  nlohmann::json parts = nlohmann::json::array();
  if (!reader.is_view()) return parts;
  std::vector<std::int64_t> visible(reader.parts().parts.size(), 0);
  for (const RowSegment& s : reader.parts().segments) visible[std::size_t(s.part)] += s.count;
  for (std::size_t p = 0; p < reader.parts().parts.size(); ++p) {
    const CachePart& part = reader.parts().parts[p];
    parts.push_back({{"file", part.file}, {"rows", part.rows}, {"visible_rows", visible[p]}, {"bytes", part.bytes},
                     {"shard", part.shard}, {"complete", part.complete}, {"computed_with", part.computed_with}});
  }
  return parts;
}

// Per shard count N seen in the cache's parts and run folders: which shards are done,
// interrupted (the newest part is short), failed (a dead run left commits), running or missing.
nlohmann::json describe_shards(const CacheReader& reader, const std::vector<RunState>& runs) {
  std::map<std::int64_t, std::map<std::int64_t, std::string>> state;
  for (const CachePart& part : reader.parts().parts) {
    const ShardSpec spec = shard_from_text(part.shard);
    if (!spec.whole()) state[spec.count][spec.index] = part.complete ? "done" : "interrupted";
  }
  for (const RunState& run : runs) {
    const ShardSpec spec = shard_from_text(run.shard);
    if (spec.whole()) continue;
    if (run.active) {
      state[spec.count][spec.index] = "running";
    } else if (run.records > 0) {
      state[spec.count][spec.index] = "failed";
    }
  }
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& [count, known] : state) {
    nlohmann::json entry = {{"count", count}};
    for (const char* key : {"done", "interrupted", "failed", "running", "missing"}) entry[key] = nlohmann::json::array();
    for (std::int64_t i = 0; i < count; ++i) {
      const auto it = known.find(i);
      entry[it == known.end() ? "missing" : it->second].push_back(i);
    }
    shards.push_back(entry);
  }
  return shards;
}

}  // namespace

nlohmann::json describe_cache(const std::string& path) {
  const std::int64_t pending = pending_commit_records(path);
  if (!fs::exists(path)) {
    const auto runs = run_states(path);
    const bool active = std::any_of(runs.begin(), runs.end(), [](const RunState& r) { return r.active; });
    if (active) {
      throw IoError(path + ": cache is being written (" + std::to_string(pending) +
                    " commits of a run not yet installed); inspect it when precompute ends");
    }
    if (pending > 0) {
      throw InputError(path + ": no cache yet, but an interrupted run left " + std::to_string(pending) +
                       " commits; the next precompute into it installs them and computes the rest");
    }
    throw InputError(path + ": no such cache file");
  }
  const CacheReader reader(path, CacheReader::MissingParts::kSkip);
  nlohmann::json j;
  j["path"] = path;
  j["format"] = reader.format();
  j["embcache_version"] = reader.embcache_version();
  j["rows"] = reader.rows();
  j["signature"] = reader.signature();
  j["compression"] = reader.storage().compression.to_string();
  j["dtype"] = to_string(reader.storage().dtype);
  j["file_bytes"] = cache_bytes(reader);
  j["pending_segments"] = pending;
  j["complete"] = reader.complete() ? nlohmann::json(*reader.complete()) : nlohmann::json(nullptr);
  j["content_id"] = reader.content_id() ? nlohmann::json(*reader.content_id()) : nlohmann::json(nullptr);
  j["writer_active"] = false;
  nlohmann::json runs = nlohmann::json::array();
  const std::vector<RunState> states = run_states(path);  // one listing of the run folders for both uses
  for (const RunState& run : states) {
    runs.push_back({{"shard", run.shard}, {"active", run.active}, {"pending_commits", run.records}});
    if (run.active) j["writer_active"] = true;
  }
  j["runs"] = runs;
  j["computed_with"] = reader.signature().value("computed_with", nlohmann::json());
  j["parts"] = describe_parts(reader);
  j["missing_parts"] = reader.missing_parts();
  j["shards"] = describe_shards(reader, states);
  const CacheIndex index = reader.read_index();
  std::map<std::string, std::int64_t> splits;
  for (const auto& s : index.splits) ++splits[s];
  j["splits"] = splits;
  // Windows per split: distinct (group, window) keys; the same name in two groups is two windows.
  std::map<std::string, std::set<std::pair<std::string, std::string>>> windows_per_split;
  for (std::size_t r = 0; r < index.splits.size(); ++r) windows_per_split[index.splits[r]].insert({index.groups[r], index.windows[r]});
  nlohmann::json window_counts = nlohmann::json::object();
  for (const auto& [split, keys] : windows_per_split) window_counts[split] = keys.size();
  j["split_windows"] = window_counts;
  std::map<std::string, std::int64_t> groups;
  for (const auto& g : index.groups) ++groups[g];
  j["groups"] = groups;
  nlohmann::json levels = nlohmann::json::array();
  for (const auto& level : reader.levels()) {
    const std::int64_t bytes = reader.level_storage_bytes(level);
    const LevelOrigin& o = level.origin;
    nlohmann::json entry = {{"name", level.name},     {"index", level.index}, {"shape", level.row_shape},
                            {"stride", level.stride}, {"bytes", bytes},       {"source", level_source_name(o.source)},
                            {"source_output", o.output}};
    if (o.patch_size > 0) {
      entry["patch_size"] = o.patch_size;
      entry["prefix_tokens"] = o.prefix_tokens;
    }
    if (o.token >= 0) entry["token"] = o.token;
    if (o.time_steps > 0) entry["time_steps"] = o.time_steps;
    levels.push_back(entry);
  }
  j["levels"] = levels;
  j["labels"] = label_kinds_to_json(reader.label_kinds());
  return j;
}

}  // namespace embcache
