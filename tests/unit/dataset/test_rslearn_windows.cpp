// rslearn window listing from JSON and directories alone: no raster is opened, GDAL is not used.
#include "doctest_torch.hpp"

#include <filesystem>
#include <fstream>
#include <string>

#include "embcache/core/error.hpp"
#include "embcache/dataset/rslearn_windows.hpp"
#include "test_support.hpp"

using namespace embcache;
namespace fs = std::filesystem;

namespace {

// windows/GROUP/NAME/metadata.json with a completed (or not) sentinel2 layer of band set B1_B2.
void add_window(const std::string& root, const std::string& group, const std::string& name, const std::string& options,
                bool completed = true, const std::string& label = "") {
  const std::string dir = root + "/windows/" + group + "/" + name;
  fs::create_directories(dir + "/layers/sentinel2/B1_B2");
  std::ofstream(dir + "/metadata.json") << R"({"group": ")" << group << R"(", "name": ")" << name
                                        << R"(", "projection": {"crs": "EPSG:32610", "x_resolution": 10, "y_resolution": -10},
      "bounds": [100, 200, 164, 232], "options": )" << options << "}";
  std::ofstream(dir + "/layers/sentinel2/B1_B2/metadata.json") << R"({"num_timesteps": 3})";
  if (completed) std::ofstream(dir + "/layers/sentinel2/completed");
  if (!label.empty()) {
    fs::create_directories(dir + "/layers/landcover");
    std::ofstream(dir + "/layers/landcover/data.geojson")
        << R"({"type": "FeatureCollection", "features": [{"properties": {"other": 1}}, {"properties": {"class": ")" << label
        << R"("}}]})";
    std::ofstream(dir + "/layers/landcover/completed");
  }
}

RslearnOptions options_for(const std::string& root) {
  RslearnOptions o;
  o.root = root;
  o.layers = "sentinel2:B2";
  return o;
}

}  // namespace

TEST_SUITE("dataset") {

TEST_CASE("rslearn listing: windows in path order, splits, filters and skips, bands and timesteps") {
  testing::TempDir dir;
  const std::string root = dir.file("ds");
  add_window(root, "g", "b", R"({"split": "val", "season": "dry"})");
  add_window(root, "g", "a", R"({"season": "dry"})");
  add_window(root, "g", "c", R"({"season": "wet"})");
  add_window(root, "g", "d", R"({"season": "dry"})", /*completed=*/false);
  add_window(root, "h", "e", R"({"season": "dry"})");
  RslearnOptions o = options_for(root);
  o.tags = "season=dry";
  o.groups = "g";
  const RslearnListing listing = list_rslearn_windows(o);
  REQUIRE(listing.windows.size() == 2);
  REQUIRE(listing.windows[0].info.name == "a");
  REQUIRE(listing.windows[0].info.split == "train");  // no split option: train
  REQUIRE(listing.windows[1].info.name == "b");
  REQUIRE(listing.windows[1].info.split == "val");
  REQUIRE(listing.windows[0].info.bounds == Bounds{100, 200, 164, 232});
  REQUIRE(listing.windows[0].crs == "EPSG:32610");
  REQUIRE(listing.windows[0].y_resolution == -10);
  REQUIRE(listing.skipped == std::vector<std::pair<std::string, std::int64_t>>{
                                 {"a needed layer is not completed", 1}, {"filtered out by --tags", 1}});
  // Band set from the directory name (no config.json): B2 is the second band of B1_B2, and the
  // sidecar's 3 timesteps make it 3 channels.
  REQUIRE_FALSE(listing.from_config);
  REQUIRE(listing.bands.size() == 1);
  REQUIRE(listing.bands[0].bandset_dir == "B1_B2");
  REQUIRE(listing.bands[0].index == 1);
  REQUIRE(listing.timesteps.at("sentinel2") == 3);
  REQUIRE(listing.channels == 3);
  REQUIRE(listing.raster_path(listing.windows[0], listing.bands[0]) ==
          fs::path(root).lexically_normal().string() + "/windows/g/a/layers/sentinel2/B1_B2/geotiff.tif");
}

TEST_CASE("rslearn listing: band sets from config.json, and vector class labels in sorted order") {
  testing::TempDir dir;
  const std::string root = dir.file("ds");
  add_window(root, "g", "a", "{}", true, "water");
  add_window(root, "g", "b", "{}", true, "forest");
  std::ofstream(root + "/config.json")
      << R"({"layers": {"sentinel2": {"band_sets": [{"bands": ["B1", "B2"]}]}, "landcover": {}}})";
  RslearnOptions o = options_for(root);
  o.layers = "sentinel2:B2,B1";
  o.label_layer = "landcover";
  o.label_property = "class";
  const RslearnListing listing = list_rslearn_windows(o);
  REQUIRE(listing.from_config);
  REQUIRE(listing.bands.size() == 2);
  REQUIRE(listing.bands[0].index == 1);
  REQUIRE(listing.bands[1].index == 0);
  REQUIRE(listing.channels == 6);
  REQUIRE(listing.vector_labels);
  REQUIRE(listing.vector_label_kinds.has_class);
  REQUIRE(listing.vector_label_kinds.class_names == std::vector<std::string>{"forest", "water"});
  REQUIRE(listing.class_labels == std::vector<std::int64_t>{1, 0});
}

TEST_CASE("rslearn listing: a malformed window names its file and field; a bad option names the option") {
  testing::TempDir dir;
  const std::string root = dir.file("ds");
  add_window(root, "g", "a", "{}");
  std::ofstream(root + "/windows/g/a/metadata.json") << R"({"group": "g", "name": "a", "bounds": [0, 0, 8, 8]})";
  REQUIRE_THROWS_WITH_AS(list_rslearn_windows(options_for(root)),
                         doctest::Contains("windows/g/a/metadata.json: field \"projection\" is missing"), InputError);
  RslearnOptions bad = options_for(root);
  bad.layers = "sentinel2";
  try {
    list_rslearn_windows(bad);
    FAIL("expected a UsageError");
  } catch (const UsageError& e) {
    REQUIRE(e.option() == "layers");
    REQUIRE(e.detail() == "expected LAYER:BAND,BAND,... for each layer, got \"sentinel2\"");
  }
  REQUIRE_THROWS_WITH_AS(list_rslearn_windows(options_for(dir.file("nothing"))),
                         doctest::Contains("not an rslearn dataset (no windows/ directory)"), InputError);
  bad = options_for(root);
  bad.layers = "sentinel2:B9";
  add_window(root, "g", "a", "{}");
  REQUIRE_THROWS_WITH_AS(list_rslearn_windows(bad), doctest::Contains("layer sentinel2 has no band B9"), InputError);
}

}  // TEST_SUITE
