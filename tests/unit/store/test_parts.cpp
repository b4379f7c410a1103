#include "doctest_torch.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include <hdf5.h>

#include "embcache/core/error.hpp"
#include "embcache/h5/h5.hpp"
#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/cache_file_writer.hpp"
#include "embcache/store/cache_reader.hpp"
#include "embcache/store/part_installer.hpp"
#include "test_support.hpp"

using namespace embcache;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("store");

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the E that `run` throws ("" when it throws none).
template <class E, class F>
std::string error_message(const F& run) {
  try {
    run();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

Signature part_signature(const std::string& amp = "none") {
  Signature s;
  s["format"] = 1;
  s["dtype"] = "float32";
  s["levels"] = {"feat"};
  s["labels"] = {{"class", true}};
  s["computed_with"] = {{"device", "cpu"}, {"torch", "test"}, {"amp", amp}, {"shard", "0/1"}};
  return s;
}

// Rows w<first> ... w<first+n-1>, whose features are `value` + the row's number.
RowBatch rows_of(std::int64_t first, std::int64_t n, float value) {
  RowBatch rows;
  for (std::int64_t i = first; i < first + n; ++i) {
    rows.groups.push_back("g");
    rows.windows.push_back("w" + std::to_string(i));
    rows.splits.push_back(i % 3 ? "train" : "val");
    for (std::int64_t v : {std::int64_t(0), std::int64_t(0), std::int64_t(8), std::int64_t(8)}) rows.bounds.push_back(v);
    rows.pixel_hashes.push_back(std::uint64_t(i) * 77 + std::uint64_t(value));
  }
  rows.levels.push_back((at::arange(first, first + n, at::kFloat).view({n, 1}) + value).expand({n, 6}).contiguous());
  rows.label_class = at::arange(first, first + n, at::kLong);
  return rows;
}

LevelSpec feat() {
  LevelSpec level;
  level.name = "feat";
  level.row_shape = {6};
  return level;
}

// A closed cache file of rows_of(first, n, value), with 4 rows per chunk.
std::string part_file(testing::TempDir& dir, const std::string& name, std::int64_t first, std::int64_t n, float value,
                      const Signature& signature = part_signature()) {
  LabelKinds labels;
  labels.has_class = true;
  const std::string path = dir.file(name);
  CacheFileWriter writer(path, signature, {feat()}, labels, StorageOptions{}, 4);
  writer.append(rows_of(first, n, value));
  writer.set_content_id(new_content_id());
  writer.close();
  return path;
}

// The feature of each row, by window name.
std::map<std::string, float> features_by_window(const RowBatch& rows) {
  std::map<std::string, float> out;
  for (std::size_t r = 0; r < rows.size(); ++r) out[rows.windows[r]] = rows.levels[0][std::int64_t(r)][0].item<float>();
  return out;
}

}  // namespace

TEST_CASE("a cache of parts: rows of every part, the newest row of a key winning, the same through HDF5's view") {
  testing::TempDir dir;
  const std::string cache = dir.file("cache.h5");
  install_part(cache, part_file(dir, "a.h5", 0, 10, 0.f), false);
  CHECK_FALSE(CacheReader(cache).is_view());  // the first part is the cache itself
  const InstallStats stats = install_part(cache, part_file(dir, "b.h5", 5, 10, 100.f), false);
  CHECK(stats.hidden_rows == 5);
  CHECK(stats.parts == 2);
  CHECK(stats.rows == 15);
  const CacheReader reader(cache);
  REQUIRE(reader.is_view());
  REQUIRE(reader.rows() == 15);
  CHECK(reader.format() == 3);
  const auto features = features_by_window(reader.read_rows(0, 15));
  REQUIRE(features.size() == 15);  // no key twice
  for (int i = 0; i < 15; ++i) {
    CAPTURE(i);
    CHECK(features.at("w" + std::to_string(i)) == float(i) + (i >= 5 ? 100.f : 0.f));
  }
  // Blocks that cross parts are joined; chunks never cross a part.
  const at::Tensor level = reader.read_level(reader.levels()[0], 3, 9);
  CHECK(at::equal(level, reader.read_rows(3, 9).levels[0]));
  for (std::int64_t row = 0; row < 15; ++row) {
    const auto [first, end] = reader.chunk_around(row);
    CHECK(first <= row);
    CHECK(row < end);
    CHECK(end <= reader.run_end(row));
  }
  // HDF5's own reading of the view (what h5py sees) gives the same rows.
  const CacheFileReader through_hdf5(cache);
  REQUIRE(through_hdf5.rows() == 15);
  testing::require_same_rows(through_hdf5.read_rows(0, 15), reader.read_rows(0, 15));
  CHECK(fs::exists(cache + ".parts"));
  CHECK_FALSE(fs::exists(dir.file("a.h5")));  // renamed into place as the first cache
}

TEST_CASE("a missing part is named, the other parts stay readable, and HDF5's view reads it as NaN") {
  testing::TempDir dir;
  const std::string cache = dir.file("cache.h5");
  install_part(cache, part_file(dir, "a.h5", 0, 6, 0.f), false);
  install_part(cache, part_file(dir, "b.h5", 6, 6, 0.f), false);
  const CacheReader whole(cache);
  const std::string second = whole.part_path(1);
  fs::remove(second);
  const std::string message = error_message<InputError>([&] { CacheReader refused(cache); });
  CHECK(contains(message, fs::path(second).filename().string()));
  CHECK(contains(message, "is missing"));
  const CacheReader skipping(cache, CacheReader::MissingParts::kSkip);
  CHECK(skipping.rows() == 6);
  REQUIRE(skipping.missing_parts().size() == 1);
  CHECK(features_by_window(skipping.read_rows(0, 6)).count("w5") == 1);
  const at::Tensor through_hdf5 = CacheFileReader(cache).read_level(feat(), 0, 12);
  CHECK(at::isnan(through_hdf5.slice(0, 6)).all().item<bool>());
  CHECK_FALSE(at::isnan(through_hdf5.slice(0, 0, 6)).any().item<bool>());
  // A part cut short is refused too.
  install_part(cache, part_file(dir, "c.h5", 20, 3, 0.f), false);
  const CacheReader again(cache);
  CHECK(again.rows() == 9);
  fs::resize_file(again.part_path(1), fs::file_size(again.part_path(1)) - 100);
  CHECK(contains(error_message<InputError>([&] { CacheReader refused(cache); }), "truncated"));
}

TEST_CASE("a view that names a part outside the cache's folder is refused in one line") {
  testing::TempDir dir;
  fs::create_directories(dir.file("caches"));
  const std::string cache = dir.file("caches/cache.h5");
  install_part(cache, part_file(dir, "a.h5", 0, 6, 0.f), false);
  install_part(cache, part_file(dir, "b.h5", 6, 6, 0.f), false);
  const CacheView view = CacheReader(cache).parts();
  fs::copy_file(dir.file("caches/" + view.parts[1].file), dir.file("outside.h5"));  // readable, were the name followed
  for (const std::string& name : {std::string("../outside.h5"), dir.file("outside.h5"), std::string("cache.h5.parts/./x.h5")}) {
    CAPTURE(name);
    {
      h5::File file = h5::open_file(cache, true);
      const h5::Group parts = h5::open_group(file, "parts");
      const std::vector<std::string> files = {view.parts[0].file, name};
      REQUIRE(H5Ldelete(parts.get(), "file", H5P_DEFAULT) >= 0);
      h5::write_string_dataset(parts, "file", files, "test");
      h5::close_file(file, cache);
    }
    const std::string message = error_message<InputError>([&] { CacheReader refused(cache); });
    CHECK(contains(message, "/parts/file row 1"));
    CHECK(contains(message, "not a file in the cache's folder"));
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("compaction writes one file with the same rows and content id, and removes the parts") {
  testing::TempDir dir;
  const std::string cache = dir.file("cache.h5");
  install_part(cache, part_file(dir, "a.h5", 0, 7, 0.f), false);
  install_part(cache, part_file(dir, "b.h5", 3, 7, 50.f), false);
  RowBatch rows;
  std::optional<std::string> id;
  {
    const CacheReader before(cache);
    rows = before.read_rows(0, before.rows());
    id = before.content_id();
  }
  const CompactStats stats = compact_cache(cache, false);
  CHECK(stats.parts_before == 2);
  CHECK(stats.retired_views_kept == 0);
  const CacheReader after(cache);
  CHECK_FALSE(after.is_view());
  CHECK(after.content_id() == id);
  testing::require_same_rows(after.read_rows(0, after.rows()), rows);
  CHECK_FALSE(fs::exists(cache + ".parts"));
  CHECK(compact_cache(cache, false).parts_before == 0);  // already one file
}

// HDF5's view opens a part only when it first reads from it: a reader that opened the view before
// a compact (an h5py user through a training run) must still find the parts it names.
TEST_CASE("a compact keeps the parts of a view a reader holds open, and removes them once it is closed") {
  testing::TempDir dir;
  const std::string cache = dir.file("cache.h5");
  install_part(cache, part_file(dir, "a.h5", 0, 7, 0.f), false);
  install_part(cache, part_file(dir, "b.h5", 3, 7, 50.f), false);
  std::vector<float> expected(10 * 6);
  {
    const h5::File view = h5::open_file(cache, false);
    const CompactStats stats = compact_cache(cache, false);
    CHECK(stats.parts_before == 2);
    CHECK(stats.retired_views_kept == 1);
    CHECK(fs::exists(cache + ".parts"));
    // Read through the old view only now, as HDF5 opens each part on its first read.
    std::vector<float> seen(10 * 6);
    h5::Dataset levels = h5::open_dataset(view, "levels/feat");
    h5::read_whole(levels, h5::native<float>(), seen.data(), "levels/feat");
    const CacheReader compacted(cache);
    CHECK_FALSE(compacted.is_view());
    const RowBatch rows = compacted.read_rows(0, compacted.rows());
    std::memcpy(expected.data(), rows.levels[0].data_ptr<float>(), expected.size() * sizeof(float));
    CHECK(seen == expected);
  }
  const CompactStats again = compact_cache(cache, false);
  CHECK(again.parts_before == 0);
  CHECK(again.retired_views_kept == 0);
  CHECK_FALSE(fs::exists(cache + ".parts"));
}

TEST_CASE("a part of another signature or another --amp is refused, and the cache stays as it was") {
  testing::TempDir dir;
  const std::string cache = dir.file("cache.h5");
  install_part(cache, part_file(dir, "a.h5", 0, 4, 0.f), false);
  Signature other = part_signature();
  other["encoder_sha256"] = "another";
  const std::string a = part_file(dir, "b.h5", 4, 4, 0.f, other);
  CHECK(contains(error_message<InputError>([&] { install_part(cache, a, false); }), "encoder_sha256"));
  const std::string b = part_file(dir, "c.h5", 4, 4, 0.f, part_signature("fp16"));
  CHECK(contains(error_message<InputError>([&] { install_part(cache, b, false); }), "--amp"));
  const CacheReader reader(cache);
  CHECK_FALSE(reader.is_view());
  CHECK(reader.rows() == 4);
}

TEST_CASE("a view is complete when, for some shard count, every shard's newest part is") {
  CacheView view;
  auto part = [](const std::string& shard, bool complete) {
    CachePart p;
    p.shard = shard;
    p.complete = complete;
    return p;
  };
  view.parts = {part("0/3", true), part("2/3", true)};
  CHECK_FALSE(view.complete());  // shard 1 of 3 is missing
  view.parts.push_back(part("1/3", false));
  CHECK_FALSE(view.complete());  // interrupted
  view.parts.push_back(part("1/3", true));
  CHECK(view.complete());  // its rerun finished
  view.parts = {part("0/2", true), part("0/1", false)};
  CHECK_FALSE(view.complete());
  view.parts.push_back(part("0/1", true));
  CHECK(view.complete());
}
