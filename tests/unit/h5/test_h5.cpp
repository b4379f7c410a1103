#include "doctest_torch.hpp"

#include <cstdint>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "embcache/core/error.hpp"
#include "embcache/h5/h5.hpp"
#include "test_support.hpp"

using namespace embcache;

// The h5 functions take typed handles, so the compiler refuses a handle of the wrong kind: a
// dataset where a group or file is meant, a group where a dataset is meant, a raw hid_t anywhere.
static_assert(std::is_convertible_v<const h5::File&, h5::Location>);
static_assert(std::is_convertible_v<const h5::Group&, h5::Location>);
static_assert(!std::is_convertible_v<const h5::Dataset&, h5::Location>);
static_assert(!std::is_convertible_v<hid_t, h5::Location>);
static_assert(std::is_convertible_v<const h5::Dataset&, h5::Object>);
static_assert(!std::is_convertible_v<const h5::Dataspace&, h5::Object>);
static_assert(!std::is_invocable_v<decltype(&h5::open_group), const h5::Dataset&, const std::string&>);
static_assert(std::is_invocable_v<decltype(&h5::open_group), const h5::Group&, const std::string&>);
static_assert(!std::is_invocable_v<decltype(&h5::dataset_dims), const h5::Group&, const std::string&>);
static_assert(std::is_invocable_v<decltype(&h5::dataset_dims), const h5::Dataset&, const std::string&>);
static_assert(!std::is_invocable_v<decltype(&h5::flush), const h5::Dataset&, const std::string&>);
static_assert(!std::is_convertible_v<hid_t, h5::Type>);
static_assert(!std::is_convertible_v<const h5::Dataset&, h5::Type>);
static_assert(std::is_convertible_v<const h5::Datatype&, h5::Type>);

TEST_SUITE_BEGIN("h5");

TEST_CASE("typed handles: groups and files hold datasets, every kind carries attributes") {
  testing::TempDir dir;
  const std::string path = dir.file("t.h5");
  {
    const h5::File file = h5::create_file(path);
    const h5::Group group = h5::create_group(file, "a/b");
    h5::write_int64_dataset(group, "n", {3}, {1, 2, 3}, "n");
    h5::write_attr(file, "f", std::int64_t(1));
    h5::write_attr(group, "g", "two");
    h5::write_attr(h5::open_dataset(group, "n"), "d", std::int64_t(3));
  }
  const h5::File file = h5::open_file(path, false);
  REQUIRE(h5::exists(file, "a/b/n"));
  REQUIRE(h5::link_names(file, "a/b") == std::vector<std::string>{"n"});
  const h5::Dataset n = h5::open_dataset(h5::open_group(file, "a"), "b/n");
  std::vector<std::int64_t> values(3);
  h5::read_whole(n, h5::native<std::int64_t>(), values.data(), "n");
  REQUIRE(values == std::vector<std::int64_t>{1, 2, 3});
  REQUIRE(h5::describe_type(h5::dataset_type(n, "n")) == "int64");
  REQUIRE(h5::read_attr_int(file, "f") == 1);
  REQUIRE(h5::read_attr_string(h5::open_group(file, "a/b"), "g") == "two");
  REQUIRE(h5::read_attr_int(n, "d") == 3);
}

TEST_CASE("a dataset read row by row caches every compressed chunk one row touches, within the cap; "
          "uncompressed chunks of whole rows are read without a cache") {
  testing::TempDir dir;
  const h5::File file = h5::create_file(dir.file("rows.h5"));
  // [32, 4, 256, 256] uint8 in 1 MiB chunks of 16 rows x 4 x 128 x 128: a row touches 4 chunks.
  const std::vector<hsize_t> dims = {32, 4, 256, 256};
  const auto make = [&](const char* name, std::vector<hsize_t> chunk, bool deflate = true) {
    const h5::Dataspace space = h5::simple_space(dims, {}, name);
    const at::Tensor values = at::arange(32 * 4 * 256 * 256, at::kLong).remainder(251).to(at::kByte);
    if (chunk.empty()) {
      h5::write_whole(h5::create_dataset(file, name, h5::native<std::uint8_t>(), space, name), h5::native<std::uint8_t>(),
                      values.data_ptr(), name);
      return;
    }
    const h5::PropertyList dcpl = h5::chunked_create_plist(chunk);
    if (deflate) h5::add_deflate(dcpl, 1);
    h5::write_whole(h5::create_dataset(file, name, h5::native<std::uint8_t>(), space, dcpl, name),
                    h5::native<std::uint8_t>(), values.data_ptr(), name);
  };
  make("shared", {16, 4, 128, 128});
  make("one_row", {1, 4, 128, 128});
  make("contiguous", {});
  make("plain_rows", {16, 4, 256, 256}, false);
  make("plain_tiles", {16, 4, 128, 128}, false);
  const auto cache_bytes = [](const h5::Dataset& ds) { return h5::chunk_cache_bytes(ds, "test"); };
  constexpr std::int64_t MiB = 1 << 20;
  // HDF5's default: 1 MiB before HDF5 2 (which would decompress each chunk of "shared" 16 times),
  // 8 MiB from it.
  const std::int64_t library_default = cache_bytes(h5::open_dataset(file, "contiguous"));
  CHECK((library_default == MiB || library_default == 8 * MiB));
  std::int64_t needed = -1;
  h5::Dataset shared = h5::open_dataset_for_rows(file, "shared", 256 * MiB, &needed);
  CHECK(needed == 4 * MiB);
  CHECK(cache_bytes(shared) >= 4 * MiB);
  std::vector<std::uint8_t> row(4 * 256 * 256);
  h5::read_rows(shared, h5::native<std::uint8_t>(), 17, 1, row.data(), "shared");
  CHECK(int(row[5]) == int((17 * 4 * 256 * 256 + 5) % 251));
  shared.reset();  // an open dataset keeps the chunk cache it was first opened with
  shared = h5::open_dataset_for_rows(file, "shared", 2 * MiB, &needed);
  // Capped, but never below the default that HDF5 would give it anyway.
  CHECK(cache_bytes(shared) == std::max(2 * MiB, library_default));
  h5::Dataset one_row = h5::open_dataset_for_rows(file, "one_row", 256 * MiB, &needed);
  CHECK(needed == 0);
  CHECK(cache_bytes(one_row) == library_default);
  h5::Dataset contiguous = h5::open_dataset_for_rows(file, "contiguous", 256 * MiB, &needed);
  CHECK(needed == 0);
  // Uncompressed chunks of whole rows: HDF5 reads the rows straight into the caller's buffer.
  h5::Dataset plain_rows = h5::open_dataset_for_rows(file, "plain_rows", 256 * MiB, &needed);
  CHECK(needed == 4 * MiB);
  CHECK(cache_bytes(plain_rows) == 0);
  // Rows 10-21 span two chunks.
  const at::Tensor block = at::empty({12, 4, 256, 256}, at::kByte);
  h5::read_rows(plain_rows, h5::native<std::uint8_t>(), 10, 12, block.data_ptr(), "plain_rows");
  const at::Tensor expected = at::arange(10 * 4 * 256 * 256, 22 * 4 * 256 * 256, at::kLong).remainder(251).to(at::kByte);
  CHECK(at::equal(block.flatten(), expected));
  // Uncompressed chunks of parts of rows keep the cache: a row is read from four chunks.
  h5::Dataset plain_tiles = h5::open_dataset_for_rows(file, "plain_tiles", 256 * MiB, &needed);
  CHECK(cache_bytes(plain_tiles) >= 4 * MiB);
}

TEST_CASE("HDF5 wrapper errors name the file and carry HDF5's reason") {
  testing::TempDir dir;
  try {
    h5::open_file(dir.file("missing.h5"), false);
    FAIL("expected an error");
  } catch (const IoError& e) {
    const std::string message = e.what();
    REQUIRE(message.find("missing.h5") != std::string::npos);
    REQUIRE(message.find("HDF5:") != std::string::npos);
  }
  const h5::File file = h5::create_file(dir.file("x.h5"));
  REQUIRE_FALSE(h5::exists(file, "a/b"));
  REQUIRE_THROWS_AS(h5::open_dataset(file, "nope"), IoError);
  std::ofstream(dir.file("text.h5")) << "not hdf5";
  REQUIRE_FALSE(h5::is_hdf5(dir.file("text.h5")));
  REQUIRE_FALSE(h5::is_hdf5(dir.file("missing.h5")));
  REQUIRE_FALSE(h5::is_hdf5(dir.path()));
  // A file that cannot be read is an I/O error, never "not an HDF5 file" (a user might delete a
  // healthy cache for that). Reading /proc/self/mem at offset 0 fails with EIO.
  try {
    h5::is_hdf5("/proc/self/mem");
    FAIL("an unreadable file was taken for one that is not HDF5");
  } catch (const IoError& e) {
    CHECK(std::string(e.what()).find("/proc/self/mem: cannot read it (") == 0);
  }
}

TEST_SUITE_END();
