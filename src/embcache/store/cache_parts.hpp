// A cache of parts (format 3): CACHE.h5 is a view whose datasets are HDF5 virtual datasets over
// immutable part files in CACHE.h5.parts/, each a format 1/2 cache file. This file owns the
// parts table stored in the view (/parts) and writing a view file; part_installer.hpp installs
// parts, cache_reader.hpp reads them. docs/cache-format.md, "Caches of parts", is its human form.
#pragma once

#include "embcache/h5/h5.hpp"
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace embcache {

// The format a view file is marked with.
constexpr std::int64_t kViewFormatVersion = 3;

struct CachePart {
  std::string file;          // relative to the cache's directory: "CACHE.h5.parts/<id>.h5"
  std::int64_t rows = 0;     // rows in the part file (visible or not)
  std::int64_t bytes = 0;    // the file's size when installed: another size means missing or truncated
  std::string content_id;    // the part file's content_id
  std::string shard = "0/1"; // the --shard of the run that computed it
  bool complete = true;      // that run finished every crop of its shard
  nlohmann::json computed_with = nullptr;  // device, torch, amp, shard (signature "computed_with")
  // crop_key_hash of each of its rows (read only on request): what an install compares a new
  // part's keys with, without opening the older parts.
  std::vector<std::uint64_t> key_hashes;
};

// Rows [start, start + count) of part `part`, shown as consecutive rows of the view.
struct RowSegment {
  std::int64_t part = 0, start = 0, count = 0;
};

struct CacheView {
  std::vector<CachePart> parts;
  std::vector<RowSegment> segments;  // in view row order
  std::int64_t rows() const;
  // The view's `complete`: for some N, every shard 0..N-1 has parts and its newest is complete.
  bool complete() const;
};

// What the view file's root carries besides the table.
struct ViewHeader {
  std::string signature;   // JSON text, the newest part's
  std::string compression;
  std::string encoder_sha256, dtype;
  std::string content_id;
};

// Whether an open cache file is a view (it has /parts).
bool is_view_file(const h5::File& file);
// The table of an open view file (with each part's key hashes when asked); InputError naming
// `path` when it is damaged.
CacheView read_view_table(const h5::File& file, const std::string& path, bool key_hashes = false);
// Writes a view of `view` to `out_path` (truncating): every dataset of the first part's file,
// as a virtual dataset over the segments, with its attributes; float datasets read as NaN (int8
// levels: their scales) and integer labels as -1 where a part file is missing. Every part must
// carry its key hashes (/parts/key_hash). `cache_dir`: the
// directory the part paths are relative to, where `out_path` must lie too.
void write_view_file(const std::string& out_path, const std::string& cache_dir, const CacheView& view,
                     const ViewHeader& header);

}  // namespace embcache
