// Helpers for scripts/bench_probe.sh (the tiers themselves are timed through the real CLI):
//   make-cache PATH ROWS     a synthetic float16 cache: levels 0 [96,6,6] and 1 [1280,3,3],
//                            10 classes with a class-dependent signal, splits 80/10/10
//   yardstick PATH LEVEL E   the simplest in-memory probe: the split's features in one float32
//                            tensor, index_select per batch, one pooled linear head (AdamW)
//   encoder-loop ENC N       the same head with the encoder in the loop: N batches of images
//   matmul M N D             one float32 [M, D] x [D, N] product (the similarity matrix of a
//                            k-NN evaluation of M queries against N train rows), best of 3
// Each prints one JSON line. Not a test: it asserts nothing.
#include <torch/script.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "embcache/host/allocator_scope.hpp"
#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/cache_file_writer.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int make_cache(const std::string& path, std::int64_t rows) {
  using namespace embcache;
  std::vector<LevelSpec> levels(2);
  levels[0].name = "0";
  levels[0].index = 0;
  levels[0].row_shape = {96, 6, 6};
  levels[0].stride = 16;
  levels[1].name = "1";
  levels[1].index = 1;
  levels[1].row_shape = {1280, 3, 3};
  levels[1].stride = 32;
  LabelKinds labels;
  labels.has_class = true;
  Signature signature = {{"format", 1}, {"dtype", "float16"}, {"levels", {"0", "1"}}, {"labels", label_kinds_to_json(labels)},
                         {"encoder_sha256", "synthetic"}};
  StorageOptions storage;
  storage.dtype = StorageDtype::kFloat16;
  CacheFileWriter writer(path, signature, levels, labels, storage, rows);
  torch::manual_seed(0);
  const torch::Tensor centers0 = torch::randn({10, 96, 1, 1}), centers1 = torch::randn({10, 1280, 1, 1});
  for (std::int64_t start = 0; start < rows; start += 1000) {
    const std::int64_t n = std::min<std::int64_t>(1000, rows - start);
    RowBatch batch;
    const torch::Tensor y = torch::randint(10, {n}, torch::kLong);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t r = start + i;
      batch.groups.push_back("synthetic");
      batch.windows.push_back("w" + std::to_string(r));
      batch.splits.push_back(r % 10 == 8 ? "val" : r % 10 == 9 ? "test" : "train");
      for (std::int64_t v : {std::int64_t(0), std::int64_t(0), std::int64_t(96), std::int64_t(96)}) batch.bounds.push_back(v);
      batch.pixel_hashes.push_back(std::uint64_t(r));
    }
    batch.levels.push_back((0.05 * centers0.index_select(0, y) + torch::randn({n, 96, 6, 6})).to(torch::kHalf).contiguous());
    batch.levels.push_back((0.02 * centers1.index_select(0, y) + torch::randn({n, 1280, 3, 3})).to(torch::kHalf).contiguous());
    batch.label_class = y;
    writer.append(batch);
  }
  writer.close();
  std::printf("{\"rows\": %lld, \"path\": \"%s\"}\n", static_cast<long long>(rows), path.c_str());
  return 0;
}

int yardstick(const std::string& path, const std::string& level_name, int epochs) {
  using namespace embcache;
  CacheFileReader reader(path);
  const CacheIndex index = reader.read_index();
  std::vector<std::int64_t> rows;
  for (std::size_t i = 0; i < index.splits.size(); ++i) {
    if (index.splits[i] == "train") rows.push_back(std::int64_t(i));
  }
  const LevelSpec* level = nullptr;
  for (const auto& l : reader.levels()) {
    if (l.name == level_name) level = &l;
  }
  const auto t_load = Clock::now();
  const torch::Tensor idx = torch::tensor(rows, torch::kLong);
  const torch::Tensor x = reader.read_level(*level, 0, reader.rows()).index_select(0, idx).to(torch::kFloat);
  torch::Tensor labels = torch::empty({reader.rows()}, torch::kLong);
  h5::read_rows(h5::open_dataset(reader.file(), cache_paths::kLabelClass), h5::native<std::int64_t>(), 0,
                hsize_t(reader.rows()), labels.data_ptr(), path);
  const torch::Tensor y = labels.index_select(0, idx);
  const double load = since(t_load);
  torch::manual_seed(0);
  torch::nn::Linear head(level->row_shape[0], 10);
  torch::optim::AdamW opt(head->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0));
  const std::int64_t n = x.size(0), batch = 256;
  std::vector<double> per_epoch;
  for (int e = 0; e < epochs; ++e) {
    const auto t0 = Clock::now();
    const torch::Tensor perm = torch::randperm(n, torch::kLong);
    for (std::int64_t s = 0; s < n; s += batch) {
      const torch::Tensor b = perm.narrow(0, s, std::min(batch, n - s));
      torch::Tensor f = x.index_select(0, b);
      if (f.dim() == 4) f = f.mean({2, 3});
      const torch::Tensor loss = torch::nn::functional::cross_entropy(head->forward(f), y.index_select(0, b));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    per_epoch.push_back(double(n) / since(t0));
  }
  std::printf("{\"load_seconds\": %.3f, \"samples_per_second\": [", load);
  for (std::size_t i = 0; i < per_epoch.size(); ++i) std::printf("%s%.0f", i ? ", " : "", per_epoch[i]);
  std::printf("]}\n");
  return 0;
}

int encoder_loop(const std::string& encoder_path, int batches) {
  // The encoder gets the allocator settings precompute gives it: the baseline is not slowed.
  const embcache::EncoderAllocatorScope allocator;
  torch::jit::Module encoder = torch::jit::load(encoder_path);
  encoder.eval();
  torch::manual_seed(0);
  torch::nn::Linear head(1280, 10);
  torch::optim::AdamW opt(head->parameters(), torch::optim::AdamWOptions(1e-3));
  const std::int64_t batch = 256;
  double seconds = 0;
  for (int i = 0; i <= batches; ++i) {
    const torch::Tensor images = torch::randn({batch, 3, 96, 96});
    const torch::Tensor y = torch::randint(10, {batch}, torch::kLong);
    const auto t0 = Clock::now();
    torch::Tensor feats;
    {
      c10::InferenceMode guard;
      feats = encoder.forward({images}).toTensorList().get(1).mean({2, 3});
    }
    const torch::Tensor loss = torch::nn::functional::cross_entropy(head->forward(feats.clone()), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (i > 0) seconds += since(t0);  // the first batch warms up
  }
  std::printf("{\"samples_per_second\": %.0f}\n", double(batch * batches) / seconds);
  return 0;
}

int matmul(std::int64_t m, std::int64_t n, std::int64_t d) {
  const torch::Tensor a = torch::randn({m, d}), b = torch::randn({n, d});
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    const torch::Tensor c = torch::mm(a, b.t());
    best = std::min(best, since(t0));
  }
  std::printf("{\"seconds\": %.6f}\n", best);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "make-cache" && argc == 4) return make_cache(argv[2], std::stoll(argv[3]));
    if (mode == "yardstick" && argc == 5) return yardstick(argv[2], argv[3], std::stoi(argv[4]));
    if (mode == "encoder-loop" && argc == 4) return encoder_loop(argv[2], std::stoi(argv[3]));
    if (mode == "matmul" && argc == 5) return matmul(std::stoll(argv[2]), std::stoll(argv[3]), std::stoll(argv[4]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_probe: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: bench_probe make-cache PATH ROWS | yardstick PATH LEVEL EPOCHS | encoder-loop ENCODER BATCHES"
                       " | matmul M N D\n");
  return 2;
}
