#include "embcache/store/part_installer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <unordered_set>

#include "embcache/core/crop_key.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/core/file_lock.hpp"
#include "embcache/core/shard_spec.hpp"
#include "embcache/store/cache_file_writer.hpp"
#include "embcache/store/retired_views.hpp"

namespace fs = std::filesystem;

namespace embcache {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void say_waiting(const std::string& path, const std::string& holder) {
  std::fprintf(stderr, "embcache: waiting for %s to finish installing into the cache (it holds %s)\n", holder.c_str(),
               path.c_str());
}

// The install lock: held for one install, waited for.
FileLock install_lock(const std::string& cache_path) {
  return FileLock(cache_path + ".lock", FileLock::Wait{"the cache's directory must be writable (choose another --out)",
                                                       say_waiting});
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw IoError("cannot rename " + from + " to " + to + ": " + std::strerror(errno));
  }
}

std::string directory_of(const std::string& path) { return fs::absolute(path).parent_path().string(); }

// A second name for a file (a copy on a file system without hard links). The caller's name stays
// until the view that names the new one is installed: a crash in between loses nothing.
void link_or_copy(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::remove(to, ec);
  fs::create_hard_link(from, to, ec);
  if (ec) fs::copy_file(from, to, ec);
  if (ec) throw IoError("cannot link " + from + " to " + to + ": " + ec.message());
}

std::string amp_of(const nlohmann::json& computed_with) {
  if (!computed_with.is_object()) return "";
  return computed_with.value("amp", std::string());
}

std::vector<std::uint64_t> key_hashes_of(const CacheIndex& index) {
  std::vector<std::uint64_t> hashes(index.windows.size());
  for (std::size_t r = 0; r < hashes.size(); ++r) hashes[r] = crop_key_hash(index.groups[r], index.windows[r], &index.bounds[4 * r]);
  return hashes;
}

// The part entry of a closed cache file at `relative` (to the cache's directory).
CachePart part_entry(const CacheFileReader& file, const std::string& relative, const std::string& absolute) {
  const nlohmann::json computed = file.signature().value("computed_with", nlohmann::json());
  const std::string shard = computed.is_object() ? computed.value("shard", std::string("0/1")) : "0/1";
  return {relative, file.rows(), file_bytes(absolute, "cache part"), file.content_id().value_or(new_content_id()),
          shard, file.complete().value_or(true), computed, key_hashes_of(file.read_index())};
}

// InputError when `part` may not join `cache`: another signature, level shapes or amp.
void check_joinable(const CacheReader& cache, const CacheFileReader& part) {
  const auto differences = signature_differences(cache.signature(), part.signature());
  if (!differences.empty()) {
    std::string fields;
    for (const auto& f : differences) fields += (fields.empty() ? "" : ", ") + f;
    throw InputError(cache.path() + ": the rows of " + part.path() + " were made with a different " + fields +
                     " than the cache's; a shard must use the options of the cache it joins (or another --out)");
  }
  for (const LevelSpec& level : part.levels()) {
    for (const LevelSpec& existing : cache.levels()) {
      if (existing.name == level.name && existing.row_shape != level.row_shape) {
        throw InputError(cache.path() + ": level " + level.name + " is stored with shape " + existing.shape_text() +
                         " but " + part.path() + " has " + level.shape_text() + "; use another --out");
      }
    }
  }
  if (const std::string why = amp_conflict(cache, part.signature()); !why.empty()) throw InputError(why);
}

// The view's table as it stands (a cache of one file becomes its first part, hard-linked into
// the parts folder), without parts that are missing.
CacheView current_parts(const CacheReader& cache, const std::string& cache_path) {
  CacheView view;
  const std::string dir = directory_of(cache_path);
  if (!cache.is_view()) {
    const CacheFileReader whole(cache_path);
    const std::string id = whole.content_id().value_or(new_content_id());
    const std::string relative = fs::path(parts_dir_of(cache_path)).filename().string() + "/" + id + ".h5";
    const std::string linked = dir + "/" + relative;
    make_directories(parts_dir_of(cache_path), "cache parts folder");
    link_or_copy(cache_path, linked);
    view.parts.push_back(part_entry(whole, relative, linked));
    view.segments.push_back({0, 0, whole.rows()});
    return view;
  }
  view = cache.parts();
  return view;
}

// Leaves out parts without visible rows, renumbering the segments.
void drop_unused_parts(CacheView& view) {
  std::vector<std::int64_t> renumbered(view.parts.size(), -1);
  std::vector<CachePart> kept;
  for (const RowSegment& s : view.segments) {
    if (renumbered[std::size_t(s.part)] < 0) {
      renumbered[std::size_t(s.part)] = std::int64_t(kept.size());
      kept.push_back(view.parts[std::size_t(s.part)]);
    }
  }
  for (RowSegment& s : view.segments) s.part = renumbered[std::size_t(s.part)];
  view.parts = std::move(kept);
}

// Hides the rows of `view` whose key hash is in `keys` (64-bit hashes of the keys: two keys
// that differ share one with odds of about rows^2 / 2^65).
std::int64_t hide_keys(CacheView& view, const std::unordered_set<std::uint64_t>& keys) {
  std::vector<RowSegment> kept;
  std::int64_t hidden = 0;
  for (const RowSegment& s : view.segments) {
    const auto& hashes = view.parts[std::size_t(s.part)].key_hashes;
    std::int64_t run_start = -1;
    for (std::int64_t i = 0; i < s.count; ++i) {
      const bool hide = keys.count(hashes[std::size_t(s.start + i)]) > 0;
      hidden += hide;
      if (!hide && run_start < 0) run_start = i;
      if (hide && run_start >= 0) {
        kept.push_back({s.part, s.start + run_start, i - run_start});
        run_start = -1;
      }
    }
    if (run_start >= 0) kept.push_back({s.part, s.start + run_start, s.count - run_start});
  }
  view.segments = std::move(kept);
  return hidden;
}

// Writes `view` beside the cache and renames it over CACHE.h5 (a view replaced is retired first,
// for its readers). The part files it no longer names go in the caller's sweep_parts, once the
// caller has closed the old view.
void install_view(const std::string& cache_path, CacheView view, const ViewHeader& header, bool replaces_view,
                  bool fsync) {
  drop_unused_parts(view);
  const std::string dir = directory_of(cache_path);
  const std::string tmp = cache_path + ".view.tmp";
  try {
    write_view_file(tmp, dir, view, header);
    if (fsync) sync_path(tmp);
    if (replaces_view) retire_view(cache_path);
    rename_or_throw(tmp, cache_path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  if (fsync) sync_path(dir);
}

ViewHeader header_for(const CacheFileReader& newest, const StorageOptions& storage, const std::string& content_id) {
  ViewHeader header;
  header.signature = newest.signature().dump();
  header.compression = storage.compression.to_string();
  header.encoder_sha256 = newest.signature().value("encoder_sha256", std::string());
  header.dtype = to_string(storage.dtype);
  header.content_id = content_id;
  return header;
}

// Copies the cache's rows (the same content id) into CACHE.h5.tmp and renames that over the
// cache: the rename is the commit. Returns the rows copied.
std::int64_t rewrite_as_one_file(const CacheReader& cache, bool complete, bool fsync) {
  const std::string tmp = cache.path() + ".tmp";
  std::int64_t copied = 0;
  try {
    copied = copy_rows_to_file(cache, tmp, cache.signature(), cache.levels(), cache.label_kinds(), cache.storage(), complete,
                               cache.content_id().value_or(new_content_id()));
    if (fsync) sync_path(tmp);
    if (cache.is_view()) retire_view(cache.path());
    rename_or_throw(tmp, cache.path());
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  if (fsync) sync_path(directory_of(cache.path()));
  return copied;
}

// Rows per copy block: about 64 MiB of features.
std::int64_t rows_per_block(const RowSource& source) {
  return std::max<std::int64_t>(1, (std::int64_t(64) << 20) / std::max<std::int64_t>(source.row_feature_bytes(), 1));
}

}  // namespace

std::string parts_dir_of(const std::string& cache_path) { return cache_path + ".parts"; }

std::string new_content_id() {
  std::random_device device;
  char text[33];
  for (int i = 0; i < 4; ++i) std::snprintf(text + 8 * i, 9, "%08x", unsigned(device()));
  return text;
}

std::string amp_conflict(const CacheReader& cache, const Signature& wanted) {
  const std::string amp = amp_of(wanted.value("computed_with", nlohmann::json()));
  if (amp.empty()) return "";
  for (const CachePart& part : cache.parts().parts) {
    const std::string theirs = amp_of(part.computed_with);
    if (!theirs.empty() && theirs != amp) {
      return cache.path() + ": part " + part.file + " was computed with --amp " + theirs + ", this run uses --amp " +
             amp + "; features of different precisions are never mixed in one cache: use --amp " + theirs +
             ", or another --out";
    }
  }
  return "";
}

namespace {

// install_part and mark_shard_complete under the install lock, their readers of the old cache
// closed when they return.
InstallStats install_into(const std::string& cache_path, const std::string& part_file, bool fsync) {
  InstallStats stats;
  const std::string dir = directory_of(cache_path);
  if (!fs::exists(cache_path)) {
    stats.rows = CacheFileReader(part_file).rows();
    if (fsync) sync_path(part_file);
    rename_or_throw(part_file, cache_path);
    if (fsync) sync_path(dir);
    return stats;
  }
  const CacheReader cache(cache_path, CacheReader::MissingParts::kSkip, /*key_hashes=*/true);
  const StorageOptions storage = cache.storage();
  std::unordered_set<std::uint64_t> keys;
  std::string relative;
  CachePart entry;
  ViewHeader header;
  {
    const CacheFileReader part(part_file);
    check_joinable(cache, part);
    const std::string id = part.content_id().value_or(new_content_id());
    relative = fs::path(parts_dir_of(cache_path)).filename().string() + "/" + id + ".h5";
    entry = part_entry(part, relative, part_file);
    keys.insert(entry.key_hashes.begin(), entry.key_hashes.end());
    header = header_for(part, storage, new_content_id());
  }
  CacheView view = current_parts(cache, cache_path);
  stats.hidden_rows = hide_keys(view, keys);
  make_directories(parts_dir_of(cache_path), "cache parts folder");
  if (fsync) sync_path(part_file);
  link_or_copy(part_file, dir + "/" + relative);
  if (fsync) sync_path(parts_dir_of(cache_path));  // the link, before a view names it
  view.parts.push_back(entry);
  view.segments.push_back({std::int64_t(view.parts.size()) - 1, 0, entry.rows});
  // Rows in shard order (N, then I; a shard's parts in the order they came): the same parts give
  // the same view whichever shard finished first, so a probe trained on it is the same too.
  std::stable_sort(view.segments.begin(), view.segments.end(), [&](const RowSegment& a, const RowSegment& b) {
    const ShardSpec x = shard_from_text(view.parts[std::size_t(a.part)].shard);
    const ShardSpec y = shard_from_text(view.parts[std::size_t(b.part)].shard);
    return std::make_pair(x.count, x.index) < std::make_pair(y.count, y.index);
  });
  install_view(cache_path, view, header, cache.is_view(), fsync);
  stats.rows = view.rows();
  stats.parts = std::int64_t(view.parts.size());
  return stats;
}

std::int64_t mark_complete(const std::string& cache_path, const std::string& shard, bool fsync) {
  if (!fs::exists(cache_path)) return 0;
  const CacheReader cache(cache_path, CacheReader::MissingParts::kSkip, /*key_hashes=*/true);
  if (!cache.is_view()) {
    // Rewriting the attribute in place could damage the file if we died midway: copied, once.
    if (cache.complete() != false) return 0;
    return rewrite_as_one_file(cache, /*complete=*/true, fsync);
  }
  CacheView view = cache.parts();
  bool changed = false;
  for (auto it = view.parts.rbegin(); it != view.parts.rend(); ++it) {
    if (it->shard != shard) continue;
    changed = !it->complete;
    it->complete = true;
    break;
  }
  if (!changed) return 0;
  const CacheFileReader newest(cache.part_path(std::size_t(view.segments.back().part)));
  install_view(cache_path, view, header_for(newest, cache.storage(), cache.content_id().value_or(new_content_id())),
               /*replaces_view=*/true, fsync);
  return 0;
}

}  // namespace

InstallStats install_part(const std::string& cache_path, const std::string& part_file, bool fsync) {
  const FileLock lock = install_lock(cache_path);
  const InstallStats stats = install_into(cache_path, part_file, fsync);
  sweep_parts(cache_path);
  return stats;
}

std::int64_t mark_shard_complete(const std::string& cache_path, const std::string& shard, bool fsync) {
  const FileLock lock = install_lock(cache_path);
  const std::int64_t copied = mark_complete(cache_path, shard, fsync);
  sweep_parts(cache_path);
  return copied;
}

void remove_cache(const std::string& cache_path) {
  const FileLock lock = install_lock(cache_path);
  std::error_code ec;
  fs::remove_all(cache_path + ".segments", ec);
  fs::remove_all(parts_dir_of(cache_path), ec);
  if (fs::exists(cache_path) && !fs::remove(cache_path, ec)) {
    throw IoError("cannot remove " + cache_path + ": " + ec.message());
  }
}

std::int64_t copy_rows_to_file(const RowSource& source, const std::string& path, const Signature& signature,
                               const std::vector<LevelSpec>& levels, const LabelKinds& labels,
                               const StorageOptions& storage, bool complete, const std::string& content_id) {
  CacheFileWriter writer(path, signature, levels, labels, storage, source.rows());
  const std::int64_t block = rows_per_block(source);
  for (std::int64_t row = 0; row < source.rows(); row += block) {
    writer.append(source.read_rows(row, std::min(block, source.rows() - row)));
  }
  writer.set_complete(complete);
  writer.set_content_id(content_id);
  writer.close();
  return writer.rows();
}

CompactStats compact_cache(const std::string& cache_path, bool fsync) {
  const double started = now_seconds();
  const FileLock lock = install_lock(cache_path);
  CompactStats stats;
  {
    const CacheReader cache(cache_path);
    stats.rows = cache.rows();
    if (cache.is_view()) {
      stats.parts_before = std::int64_t(cache.parts().parts.size());
      rewrite_as_one_file(cache, cache.complete().value_or(true), fsync);
    }
  }
  // A reader that opened the old view an instant before the rename takes HDF5's lock on it right
  // after its open(): give it that instant before asking who holds the view.
  if (stats.parts_before > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Also for a cache that is one file already: parts an earlier compact kept for a reader go now.
  stats.retired_views_kept = sweep_parts(cache_path);
  stats.bytes = file_bytes(cache_path, "cache");
  stats.seconds = now_seconds() - started;
  return stats;
}

}  // namespace embcache
