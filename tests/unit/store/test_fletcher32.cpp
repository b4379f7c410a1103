#include "doctest_torch.hpp"


#include "embcache/store/fletcher32.hpp"
#include "embcache/h5/h5.hpp"
#include "embcache/store/storage_options.hpp"
#include "test_support.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("store");

namespace {

// HDF5's reference loop, written out as in its H5checksum.c, for comparison on edge cases.
std::uint32_t reference_fletcher32(const std::uint8_t* data, std::size_t size) {
  std::size_t len = size / 2;
  std::uint32_t sum1 = 0, sum2 = 0;
  while (len) {
    std::size_t tlen = len > 360 ? 360 : len;
    len -= tlen;
    do {
      sum1 += (std::uint32_t(data[0]) << 8) | data[1];
      data += 2;
      sum2 += sum1;
    } while (--tlen);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (size % 2) {
    sum1 += std::uint32_t(*data) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

}  // namespace

TEST_CASE("fletcher32 equals the checksum HDF5 itself stores with each chunk") {
  testing::TempDir dir;
  const h5::File file = h5::create_file(dir.file("f.h5"));
  const std::vector<hsize_t> dims = {64, 1000}, chunk = {16, 1000};
  const h5::Dataspace space = h5::simple_space(dims, {}, "x");
  StorageOptions options;
  const h5::PropertyList dcpl = feature_create_plist(chunk, options);
  const h5::Dataset ds = h5::create_dataset(file, "x", h5::little_endian<float>(), space, dcpl, "x");
  const at::Tensor values = at::randn({64, 1000});
  values[3][7] = 65535.0f;  // patterns whose sums hit the 0 / 65535 folding edge somewhere
  h5::write_rows(ds, h5::native<float>(), 0, 64, values.data_ptr(), "x");
  h5::flush(file, "f.h5");
  for (hsize_t c = 0; c < 4; ++c) {
    const std::vector<hsize_t> offset = {c * 16, 0};
    const hsize_t stored = h5::chunk_location(ds, offset, "x").size;
    REQUIRE(stored == 16 * 1000 * 4 + 4);
    std::vector<std::uint8_t> raw(stored);
    REQUIRE(h5::read_plain_chunk(ds, offset, raw.data(), raw.size()));
    const std::uint32_t hdf5 = std::uint32_t(raw[stored - 4]) | (std::uint32_t(raw[stored - 3]) << 8) |
                               (std::uint32_t(raw[stored - 2]) << 16) | (std::uint32_t(raw[stored - 1]) << 24);
    REQUIRE(fletcher32(raw.data(), stored - 4) == hdf5);
  }
}

TEST_CASE("fletcher32 matches HDF5's loop on every length and on saturated data") {
  std::vector<std::uint8_t> bytes(5000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::uint8_t((i * 131 + 7) ^ (i >> 3));
  for (std::size_t n : {0, 1, 2, 3, 719, 720, 721, 722, 1441, 4999, 5000}) {
    CAPTURE(n);
    REQUIRE(fletcher32(bytes.data(), n) == reference_fletcher32(bytes.data(), n));
  }
  std::vector<std::uint8_t> ones(100000, 0xff), zeros(100000, 0);
  REQUIRE(fletcher32(ones.data(), ones.size()) == reference_fletcher32(ones.data(), ones.size()));
  REQUIRE(fletcher32(zeros.data(), zeros.size()) == reference_fletcher32(zeros.data(), zeros.size()));
  // Its speed is a benchmark figure: build/bench/bench_checksums.
}

TEST_CASE("fletcher32_of_rows gives the checksum of rows laid end to end from the rows' own checksums") {
  auto check = [](const std::vector<std::vector<std::uint8_t>>& rows) {
    std::vector<std::uint8_t> all;
    std::vector<std::uint32_t> sums;
    for (const auto& row : rows) {
      all.insert(all.end(), row.begin(), row.end());
      sums.push_back(fletcher32(row.data(), row.size()));
    }
    REQUIRE(fletcher32_of_rows(sums.data(), sums.size(), rows.front().size()) == fletcher32(all.data(), all.size()));
  };
  std::uint32_t state = 12345;
  auto random_row = [&](std::size_t bytes) {
    std::vector<std::uint8_t> row(bytes);
    for (auto& b : row) b = std::uint8_t((state = state * 1103515245u + 12345u) >> 24);
    return row;
  };
  for (std::size_t bytes : {2, 6, 718, 720, 722, 4096, 147456}) {
    CAPTURE(bytes);
    for (std::size_t n : {1, 2, 7, 16}) {
      CAPTURE(n);
      std::vector<std::vector<std::uint8_t>> rows;
      for (std::size_t i = 0; i < n; ++i) rows.push_back(random_row(bytes));
      check(rows);
      // All-zero rows first, and rows of 0xff (sums that are multiples of 65535 without being 0).
      rows.front().assign(bytes, 0);
      check(rows);
      for (auto& row : rows) row.assign(bytes, 0xff);
      check(rows);
      for (auto& row : rows) row.assign(bytes, 0);
      check(rows);
    }
  }
}

TEST_SUITE_END();
