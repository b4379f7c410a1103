// LibTorch's OpenMP workers and embcache's own OpenMP team (pipeline/core_sharing) must be one
// runtime, or precompute's OpenMP tuning does not reach the encoder's workers (docs/install.md);
// and the intra-op thread count is set through one helper.
#include "doctest_torch.hpp"

#include <ATen/Parallel.h>

#include <atomic>

#include "embcache/host/intra_op_threads.hpp"
#include "embcache/host/openmp_runtime.hpp"
#include "embcache/pipeline/core_sharing.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("host");

TEST_CASE("one OpenMP runtime serves LibTorch and embcache") {
  // Run both: an ATen parallel loop and embcache's own team.
  at::set_num_threads(2);
  std::atomic<int> chunks{0};
  at::parallel_for(0, 1000, 1, [&](std::int64_t, std::int64_t) { chunks.fetch_add(1); });
  { OpenMpSpinThrottle throttle(2); }
  const std::vector<std::string> runtimes = loaded_openmp_runtimes();
  std::string all;
  for (const auto& r : runtimes) all += r + " ";
  INFO("loaded: " << all);
  REQUIRE(runtimes.size() == 1);
  REQUIRE(runtimes[0].find("libgomp") != std::string::npos);
  REQUIRE(chunks.load() >= 1);
}

TEST_CASE("use_intra_op_threads sets LibTorch's intra-op thread count") {
  const int before = at::get_num_threads();
  const int other = before == 1 ? 2 : 1;
  use_intra_op_threads(other);
  CHECK(at::get_num_threads() == other);
  use_intra_op_threads(other);  // unchanged: left as it is
  CHECK(at::get_num_threads() == other);
  use_intra_op_threads(before);
  CHECK(at::get_num_threads() == before);
}

TEST_SUITE_END();
