#include "embcache/store/cache_parts.hpp"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <map>

#include "embcache/core/error.hpp"
#include "embcache/h5/h5.hpp"
#include "embcache/store/cache_schema.hpp"

namespace embcache {
namespace {

constexpr const char* kParts = "parts";

// A part's file as the view names it stays in the cache's folder: relative, and no component
// that climbs out of it. Whatever a damaged or hostile view says, a reader opens only files there.
bool stays_in_folder(const std::string& file) {
  const std::filesystem::path path(file);
  if (file.empty() || path.has_root_path()) return false;
  for (const auto& component : path) {
    if (component == ".." || component == "." || component.empty()) return false;
  }
  return true;
}

// Datasets of a cache file, "index/group" ... "levels/2", in a fixed order.
std::vector<std::string> dataset_paths(const h5::File& file) {
  std::vector<std::string> paths;
  for (const char* group : {"index", cache_paths::kLevels, cache_paths::kScales, "labels"}) {
    if (!h5::exists(file, group)) continue;
    for (const auto& name : h5::link_names(file, group)) paths.push_back(std::string(group) + "/" + name);
  }
  return paths;
}

// What a reader gets where a part file is missing: NaN for floats, -1 for signed integers
// (labels, bounds), HDF5's zero for the rest (int8 levels: their NaN scales poison them).
std::vector<std::uint8_t> missing_fill(h5::Type type, const std::string& path) {
  const h5::TypeInfo info = h5::type_info(type);
  std::vector<std::uint8_t> fill(info.size, 0);
  if (info.type_class == H5T_FLOAT) {
    if (h5::is_float16(type)) {
      const std::uint16_t nan = 0x7E00;
      std::memcpy(fill.data(), &nan, 2);
    } else if (h5::is_bfloat16(type)) {
      const std::uint16_t nan = 0x7FC0;
      std::memcpy(fill.data(), &nan, 2);
    } else if (info.size == 4) {
      const float nan = std::nanf("");
      std::memcpy(fill.data(), &nan, 4);
    } else if (info.size == 8) {
      const double nan = std::nan("");
      std::memcpy(fill.data(), &nan, 8);
    }
  } else if (info.type_class == H5T_INTEGER && info.is_signed && path.rfind("levels/", 0) != 0) {
    std::memset(fill.data(), 0xff, fill.size());
  } else if (info.type_class == H5T_STRING) {
    return {};  // HDF5's default: an empty string
  }
  return fill;
}

std::vector<std::string> strings_of(const h5::File& file, const std::string& name, const std::string& where) {
  const h5::Dataset ds = h5::open_dataset(file, name);
  return h5::read_strings(ds, 0, h5::dataset_dims(ds, where).at(0), where);
}

std::vector<std::int64_t> ints_of(const h5::File& file, const std::string& name, const std::string& where) {
  const h5::Dataset ds = h5::open_dataset(file, name);
  hsize_t total = 1;
  for (auto d : h5::dataset_dims(ds, where)) total *= d;
  std::vector<std::int64_t> values(total);
  h5::read_whole(ds, h5::native<std::int64_t>(), values.data(), where);
  return values;
}

}  // namespace

std::int64_t CacheView::rows() const {
  std::int64_t n = 0;
  for (const auto& s : segments) n += s.count;
  return n;
}

bool CacheView::complete() const {
  // Per shard count N, per shard I: whether its newest part (the table is oldest first) is complete.
  std::map<std::int64_t, std::map<std::int64_t, bool>> newest;
  for (const auto& part : parts) {
    const auto slash = part.shard.find('/');
    if (slash == std::string::npos) continue;
    newest[std::atoll(part.shard.c_str() + slash + 1)][std::atoll(part.shard.c_str())] = part.complete;
  }
  for (const auto& [count, shards] : newest) {
    bool all = std::int64_t(shards.size()) == count;
    for (const auto& [index, complete] : shards) all = all && complete;
    if (all) return true;
  }
  return false;
}

bool is_view_file(const h5::File& file) { return h5::exists(file, kParts); }

CacheView read_view_table(const h5::File& file, const std::string& path, bool key_hashes) {
  const std::string where = path + ":/parts";
  CacheView view;
  try {
    const auto files = strings_of(file, "parts/file", where);
    const auto rows = ints_of(file, "parts/rows", where);
    const auto bytes = ints_of(file, "parts/bytes", where);
    const auto ids = strings_of(file, "parts/content_id", where);
    const auto shards = strings_of(file, "parts/shard", where);
    const auto complete = ints_of(file, "parts/complete", where);
    const auto computed = strings_of(file, "parts/computed_with", where);
    const auto segments = ints_of(file, "parts/segments", where);
    const std::size_t n = files.size();
    if (rows.size() != n || bytes.size() != n || ids.size() != n || shards.size() != n || complete.size() != n ||
        computed.size() != n || segments.size() % 3 != 0) {
      throw InputError(path + ": the /parts table's columns differ in length; the view is damaged");
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!stays_in_folder(files[i])) {
        throw InputError(path + ": /parts/file row " + std::to_string(i) + " (\"" + files[i] +
                         "\") is not a file in the cache's folder; the view is damaged");
      }
      CachePart part{files[i], rows[i], bytes[i], ids[i], shards[i], complete[i] != 0, nullptr, {}};
      if (!computed[i].empty()) part.computed_with = nlohmann::json::parse(computed[i], nullptr, false);
      view.parts.push_back(std::move(part));
    }
    for (std::size_t s = 0; s < segments.size(); s += 3) {
      const RowSegment segment{segments[s], segments[s + 1], segments[s + 2]};
      if (segment.part < 0 || segment.part >= std::int64_t(n) || segment.start < 0 || segment.count < 0 ||
          segment.start + segment.count > view.parts[std::size_t(segment.part)].rows) {
        throw InputError(path + ": /parts/segments row " + std::to_string(s / 3) + " lies outside its part; the view is damaged");
      }
      view.segments.push_back(segment);
    }
    if (key_hashes) {
      const auto hashes = ints_of(file, "parts/key_hash", where);
      std::size_t at = 0;
      for (auto& part : view.parts) {
        if (at + std::size_t(part.rows) > hashes.size()) throw InputError(path + ": /parts/key_hash is short; the view is damaged");
        part.key_hashes.assign(hashes.begin() + std::ptrdiff_t(at), hashes.begin() + std::ptrdiff_t(at + std::size_t(part.rows)));
        at += std::size_t(part.rows);
      }
    }
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(path + ": cannot read the table of parts (" + e.what() + "); the view is damaged");
  }
  return view;
}

void write_view_file(const std::string& out_path, const std::string& cache_dir, const CacheView& view,
                     const ViewHeader& header) {
  if (view.parts.empty()) throw std::logic_error("write_view_file: a view without parts");
  h5::File file = h5::create_view_file(out_path);
  {
    const h5::File& root = file;
    const std::string first_path = cache_dir + "/" + view.parts.front().file;
    const h5::File first = h5::open_file(first_path, false);
    h5::write_attr(root, "embcache_format", kViewFormatVersion);
    h5::write_attr(root, "embcache_version", std::string(EMBCACHE_VERSION));
    h5::write_attr(root, "signature", header.signature);
    h5::write_attr(root, "compression", header.compression);
    h5::write_attr(root, "encoder_sha256", header.encoder_sha256);
    h5::write_attr(root, "dtype", header.dtype);
    h5::write_attr(root, "complete", std::int64_t(view.complete() ? 1 : 0));
    h5::write_attr(root, "content_id", header.content_id);
    const hsize_t rows = hsize_t(view.rows());
    for (const std::string& path : dataset_paths(first)) {
      const std::string where = out_path + ":/" + path;
      const h5::Dataset source = h5::open_dataset(first, path);
      const h5::Datatype type = h5::dataset_type(source, first_path + ":/" + path);
      std::vector<hsize_t> row_shape = h5::dataset_dims(source, first_path + ":/" + path);
      row_shape.erase(row_shape.begin());
      std::vector<h5::VirtualSource> sources;
      hsize_t at = 0;
      for (const RowSegment& s : view.segments) {
        const CachePart& part = view.parts[std::size_t(s.part)];
        sources.push_back({part.file, path, hsize_t(part.rows), hsize_t(s.start), at, hsize_t(s.count)});
        at += hsize_t(s.count);
      }
      const std::string parent = path.substr(0, path.find('/'));
      if (!h5::exists(root, parent)) h5::create_group(root, parent);
      const h5::Dataset ds = h5::create_virtual_dataset(root, path, type, row_shape, rows, sources,
                                                        missing_fill(type, path), where);
      h5::copy_attributes(source, ds, where);
    }
    const h5::Group parts = h5::create_group(root, kParts);
    std::vector<std::string> files, ids, shards, computed;
    std::vector<std::int64_t> part_rows, bytes, complete, segments, hashes;
    for (const CachePart& p : view.parts) {
      if (std::int64_t(p.key_hashes.size()) != p.rows) throw std::logic_error("write_view_file: a part without its key hashes");
      for (auto h : p.key_hashes) hashes.push_back(std::int64_t(h));
      files.push_back(p.file);
      ids.push_back(p.content_id);
      shards.push_back(p.shard);
      computed.push_back(p.computed_with.is_null() ? "" : p.computed_with.dump());
      part_rows.push_back(p.rows);
      bytes.push_back(p.bytes);
      complete.push_back(p.complete ? 1 : 0);
    }
    for (const RowSegment& s : view.segments) segments.insert(segments.end(), {s.part, s.start, s.count});
    const std::string where = out_path + ":/parts";
    const hsize_t n = files.size();
    h5::write_string_dataset(parts, "file", files, where);
    h5::write_int64_dataset(parts, "rows", {n}, part_rows, where);
    h5::write_int64_dataset(parts, "bytes", {n}, bytes, where);
    h5::write_string_dataset(parts, "content_id", ids, where);
    h5::write_string_dataset(parts, "shard", shards, where);
    h5::write_int64_dataset(parts, "complete", {n}, complete, where);
    h5::write_string_dataset(parts, "computed_with", computed, where);
    h5::write_int64_dataset(parts, "segments", {hsize_t(view.segments.size()), 3}, segments, where);
    h5::write_int64_dataset(parts, "key_hash", {hsize_t(hashes.size())}, hashes, where);
  }
  h5::close_file(file, out_path);
}

}  // namespace embcache
