// On a GPU: features the encoder computes on CUDA equal the CPU's. These cases run only where
// LibTorch sees a CUDA device (doctest::skip otherwise, and the run's summary counts them as
// skipped); scripts/env/check_cuda_build.sh compiles them against Debian 13's CUDA LibTorch.
#include "doctest_torch.hpp"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include "embcache/pipeline/precompute.hpp"
#include "embcache/store/cache_file_reader.hpp"
#include "test_support.hpp"

using namespace embcache;

namespace {

bool no_gpu() { return !torch::cuda::is_available(); }

}  // namespace

TEST_CASE("CUDA features equal the CPU's within 1e-4 relative, TF32 off" * doctest::test_suite("pipeline") *
          doctest::skip(no_gpu())) {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  testing::TempDir dir;
  testing::ArrayDatasetSpec spec;
  spec.images = at::randint(0, 255, {6, 3, 40, 48}).to(at::kByte);
  testing::write_array_dataset(dir.file("data.h5"), spec);
  for (const char* encoder : {"multi_scripted.pt", "heavy.pt", "vit_scripted.pt"}) {
    INFO("encoder " << encoder);
    PrecomputeOptions cpu = testing::small_precompute(encoder, dir.file("data.h5"), dir.file(std::string("cpu-") + encoder));
    cpu.crop_size = "32";
    cpu.overlap = 0;
    PrecomputeOptions cuda = cpu;
    cuda.out = dir.file(std::string("cuda-") + encoder);
    cuda.device = "cuda";
    run_precompute(plan_precompute(cpu));
    const PrecomputeSummary summary = run_precompute(plan_precompute(cuda));
    REQUIRE(summary.device == "cuda:0");
    const CacheFileReader a(cpu.out), b(cuda.out);
    REQUIRE(a.rows() == b.rows());
    const RowBatch want = a.read_rows(0, a.rows()), got = b.read_rows(0, b.rows());
    REQUIRE(got.windows == want.windows);
    for (std::size_t l = 0; l < want.levels.size(); ++l) {
      const at::Tensor w = want.levels[l].to(at::kFloat), g = got.levels[l].to(at::kFloat);
      const double scale = std::max(w.abs().max().item<double>(), 1e-12);
      const double relative = (g - w).abs().max().item<double>() / scale;
      INFO("level " << l << ": max relative difference " << relative);
      REQUIRE(relative <= 1e-4);
    }
  }
}
