// What a cache holds, as one JSON object: format, signature, rows per split and group, levels
// and their origins, labels, parts and shards, runs still writing. `embcache inspect` prints it
// (or, with --json, this object); the benchmarks read it too.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace embcache {

// InputError when there is no cache at `path`; IoError while a run is still writing its first
// part. Its keys are what `embcache inspect --json` prints.
nlohmann::json describe_cache(const std::string& path);

}  // namespace embcache
