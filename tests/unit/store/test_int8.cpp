#include "doctest_torch.hpp"

#include <ATen/ATen.h>

#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/cache_file_writer.hpp"
#include "embcache/store/int8_quantization.hpp"
#include "embcache/h5/h5.hpp"
#include "test_support.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("store");

TEST_CASE("int8: x ~= q * scale within scale / 2, one scale per row and channel; zero channels exact") {
  at::Tensor x = at::randn({5, 3, 6, 6}) * at::tensor({0.01f, 1.0f, 300.0f}).view({1, 3, 1, 1});
  x.select(1, 0).select(0, 2).zero_();  // a channel that is 0 everywhere: scale 0
  const Int8Rows q = quantize_int8(x, 2);
  REQUIRE((q.values.scalar_type() == at::kChar));
  REQUIRE((q.scales.sizes().vec() == std::vector<std::int64_t>{5, 3}));
  CHECK(q.values.abs().max().item<int>() == 127);
  CHECK(q.scales[2][0].item<float>() == 0.0f);
  const at::Tensor back = dequantize_int8(q.values, q.scales);
  const at::Tensor bound = q.scales.view({5, 3, 1, 1}) / 2;
  // float32 arithmetic: the bound holds to a few ulps of the values.
  CHECK(((back - x).abs() - bound).max().item<float>() <= 1e-6f * x.abs().max().item<float>());
  CHECK(at::equal(back[2][0], x[2][0]));
  // Vectors: one scale per row.
  const at::Tensor v = at::randn({4, 10});
  const Int8Rows qv = quantize_int8(v, 1);
  REQUIRE((qv.scales.sizes().vec() == std::vector<std::int64_t>{4}));
  CHECK(((dequantize_int8(qv.values, qv.scales) - v).abs() - qv.scales.view({4, 1}) / 2).max().item<float>() <= 1e-6f);
}

TEST_CASE("an int8 cache holds /scales per level, is format 2, and reads back values and scales") {
  testing::TempDir dir;
  const std::string path = dir.file("c.h5");
  std::vector<LevelSpec> levels(2);
  levels[0].name = "map";
  levels[0].row_shape = {3, 4, 4};
  levels[0].stride = 8;
  levels[1].name = "map#cls";
  levels[1].row_shape = {3};
  levels[1].origin.source = LevelSource::kClassToken;
  levels[1].origin.output = "map";
  levels[1].origin.token = 0;
  StorageOptions storage;
  storage.dtype = StorageDtype::kInt8;
  const Signature signature = {{"dtype", "int8"}, {"levels", {"map", "map#cls"}}, {"labels", nlohmann::json::object()}};
  const at::Tensor m = at::randn({6, 3, 4, 4}), c = at::randn({6, 3});
  {
    CacheFileWriter writer(path, signature, levels, LabelKinds{}, storage, 6);
    RowBatch rows;
    for (int i = 0; i < 6; ++i) {
      rows.groups.push_back("g");
      rows.windows.push_back("w" + std::to_string(i));
      rows.splits.push_back("train");
      for (std::int64_t b : {0, 0, 32, 32}) rows.bounds.push_back(b);
      rows.pixel_hashes.push_back(std::uint64_t(i));
    }
    for (const auto& [t, axes] : {std::pair{m, 2}, std::pair{c, 1}}) {
      const Int8Rows q = quantize_int8(t, axes);
      rows.levels.push_back(q.values);
      rows.scales.push_back(q.scales);
    }
    writer.append(rows);
    writer.close();
  }
  const CacheFileReader reader(path);
  CHECK(h5::read_attr_int(reader.file(), "embcache_format").value_or(0) == 2);
  REQUIRE(reader.levels().size() == 2);
  CHECK((reader.levels()[1].origin.source == LevelSource::kClassToken));
  CHECK(reader.levels()[1].origin.output == "map");
  const RowBatch back = reader.read_rows(0, 6);
  REQUIRE(back.scales.size() == 2);
  CHECK(at::equal(back.levels[0], quantize_int8(m, 2).values));
  CHECK(at::equal(back.scales[0], quantize_int8(m, 2).scales));
  CHECK(at::equal(back.scales[1], quantize_int8(c, 1).scales));
  CHECK(reader.row_feature_bytes() == 3 * 16 + 4 * 3 + 3 + 4);
}

TEST_SUITE_END();
