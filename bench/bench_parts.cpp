// Caches of parts: how long installing the k-th part takes, how long opening and inspecting a
// cache of P parts takes, and how evenly --shard I/N splits 1,000 windows of mixed sizes for
// larger N. Prints figures; asserts nothing. Run by scripts/bench_scale.sh.
#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "embcache/store/cache_description.hpp"
#include "embcache/dataset/window_shard.hpp"
#include "embcache/store/cache_file_writer.hpp"
#include "embcache/store/cache_reader.hpp"
#include "embcache/store/part_installer.hpp"

using namespace embcache;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A part of `rows` rows (windows w<first>...), one 64-float level and class labels.
std::string write_part(const std::string& dir, std::int64_t first, std::int64_t rows) {
  Signature signature;
  signature["format"] = 1;
  signature["dtype"] = "float32";
  signature["levels"] = {"0"};
  signature["labels"] = {{"class", true}};
  signature["preprocessing"] = {{"scale", 1.0}, {"mean", {0.0}}, {"std", {1.0}}};
  signature["bands"] = nlohmann::json::array();
  signature["crop_size"] = {32, 32};
  signature["overlap"] = 0;
  signature["computed_with"] = {{"device", "cpu"}, {"torch", "bench"}, {"amp", "none"}, {"shard", "0/1"}};
  LevelSpec level;
  level.name = "0";
  level.row_shape = {64};
  LabelKinds labels;
  labels.has_class = true;
  RowBatch batch;
  for (std::int64_t i = first; i < first + rows; ++i) {
    batch.groups.push_back("g");
    batch.windows.push_back("w" + std::to_string(i));
    batch.splits.push_back(i % 5 ? "train" : "val");
    for (std::int64_t v : {std::int64_t(0), std::int64_t(0), std::int64_t(32), std::int64_t(32)}) batch.bounds.push_back(v);
    batch.pixel_hashes.push_back(std::uint64_t(i));
  }
  batch.levels.push_back(at::randn({rows, 64}));
  batch.label_class = at::arange(first, first + rows, at::kLong) % 10;
  const std::string path = dir + "/new-part.h5";
  CacheFileWriter writer(path, signature, {level}, labels, StorageOptions{}, rows);
  writer.append(batch);
  writer.set_content_id(new_content_id());
  writer.close();
  return path;
}

void installs_and_inspect(const std::string& dir, int parts, std::int64_t rows_per_part) {
  const std::string cache = dir + "/cache.h5";
  std::vector<double> install;
  for (int p = 0; p < parts; ++p) {
    const std::string part = write_part(dir, std::int64_t(p) * rows_per_part, rows_per_part);
    const auto start = std::chrono::steady_clock::now();
    install_part(cache, part, /*fsync=*/false);
    install.push_back(seconds_since(start));
    fs::remove(part);
  }
  std::printf("installing part k of %d (%lld rows each): k=2 %.3fs, k=%d %.3fs, k=%d %.3fs\n", parts,
              (long long)rows_per_part, install[1], parts / 2, install[std::size_t(parts / 2 - 1)], parts,
              install.back());
  for (int repeat = 0; repeat < 3; ++repeat) {
    auto start = std::chrono::steady_clock::now();
    const CacheReader reader(cache);
    const double open = seconds_since(start);
    start = std::chrono::steady_clock::now();
    const nlohmann::json j = describe_cache(cache);
    std::printf("cache of %zu parts, %lld rows: open %.3fs, embcache inspect %.3fs\n", j["parts"].size(),
                (long long)reader.rows(), open, seconds_since(start));
  }
}

void shard_balance() {
  for (std::int64_t n : {2, 4, 8, 16, 64}) {
    std::vector<double> worst;
    for (std::uint64_t seed = 0; seed < 400; ++seed) {
      std::uint64_t state = 1000 + seed;
      std::vector<double> per(std::size_t(n), 0);
      double total = 0;
      for (int i = 0; i < 1000; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const double crops = 1 + double((state >> 33) % 16);
        per[std::size_t(shard_of_window("group" + std::to_string(seed % 7), "window_" + std::to_string(i), n))] += crops;
        total += crops;
      }
      double w = 0;
      for (double c : per) w = std::max(w, std::abs(c - total / double(n)) / (total / double(n)));
      worst.push_back(w);
    }
    std::sort(worst.begin(), worst.end());
    std::printf("--shard I/%-3lld over 400 datasets of 1,000 windows (1-16 crops): largest shard's deviation from the mean: "
                "median %4.1f%%, 95th percentile %4.1f%%, worst %4.1f%%\n",
                (long long)n, 100 * worst[200], 100 * worst[380], 100 * worst.back());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp/embcache-bench-parts";
  const int parts = argc > 2 ? std::atoi(argv[2]) : 1000;
  fs::remove_all(dir);
  fs::create_directories(dir);
  shard_balance();
  installs_and_inspect(dir, parts, 20);
  if (!std::getenv("KEEP")) fs::remove_all(dir);  // KEEP=1: leave DIR/cache.h5 for `embcache inspect`
  return 0;
}
