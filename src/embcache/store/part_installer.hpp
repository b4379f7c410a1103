// Installing parts into a cache (cache_parts.hpp), under the cache's install lock CACHE.h5.lock,
// held only while one part goes in: shards of a dataset write into one cache concurrently. The
// rename of a new view over CACHE.h5 is the commit: a reader sees the old view or the new one.
// Also: marking a shard complete, and compaction into one file.
#pragma once

#include <cstdint>
#include <string>

#include "embcache/store/cache_reader.hpp"
#include "embcache/store/cache_schema.hpp"

namespace embcache {

// CACHE.h5.parts: where a cache's part files live.
std::string parts_dir_of(const std::string& cache_path);

// "" or why a part computed with `wanted`'s computed_with.amp may not join the parts of `cache`
// (parts that differ in --amp are refused in one cache).
std::string amp_conflict(const CacheReader& cache, const Signature& wanted);

struct InstallStats {
  std::int64_t rows = 0;         // rows of the cache after the install
  std::int64_t hidden_rows = 0;  // older rows whose key the new part holds (stale), now hidden
  std::int64_t parts = 0;        // parts after the install (0: the cache is one file)
};

// Installs `part_file`, a closed cache file on the cache's file system, into the cache at
// `cache_path`: renamed to CACHE.h5 when there is no cache yet; otherwise linked into
// CACHE.h5.parts/ and a new view written and renamed over CACHE.h5 (a cache of one file becomes
// the view's first part, by a hard link). The newest row of a key wins; its older rows are
// hidden. Missing parts are dropped from the view; parts the new view no longer names are removed
// once no reader holds an old view that names them (retired_views.hpp). InputError when the part's signature, level
// shapes or amp differ from the cache's. `fsync`: make it durable before returning. The caller
// removes `part_file` afterwards (if it is still there): until the new view is installed, it is
// what a crashed install recovers from.
InstallStats install_part(const std::string& cache_path, const std::string& part_file, bool fsync);

// A rerun of `shard` ("I/N") found nothing left to compute: the cache records that shard's
// newest part as complete (a new view, or for a cache of one file, a copy of it). Returns the
// rows copied (0 for a view).
std::int64_t mark_shard_complete(const std::string& cache_path, const std::string& shard, bool fsync);

struct CompactStats {
  std::int64_t rows = 0;
  std::int64_t parts_before = 0;
  std::int64_t bytes = 0;
  double seconds = 0;
  std::int64_t retired_views_kept = 0;  // old views a reader still holds: their parts stay for now
};
// Rewrites a cache of parts into one file (format 1 or 2), keeping its content_id (the rows are
// the same), and removes the part files but those a reader of the old view still needs
// (retired_views.hpp). A cache of one file is left as it is.
CompactStats compact_cache(const std::string& cache_path, bool fsync);

// Removes the cache at `cache_path` (--overwrite): its file, its parts and an older build's
// CACHE.h5.segments, under the install lock, so an install in progress finishes first and no
// view is left naming parts that are gone. IoError when the file cannot be removed.
void remove_cache(const std::string& cache_path);

// Copies every row of `source` into a new file `path` with the given layout. `complete` and
// `content_id` are recorded in it.
std::int64_t copy_rows_to_file(const RowSource& source, const std::string& path, const Signature& signature,
                               const std::vector<LevelSpec>& levels, const LabelKinds& labels,
                               const StorageOptions& storage, bool complete, const std::string& content_id);

// 128 random bits in hex: a new name for a new set of rows.
std::string new_content_id();
}  // namespace embcache
