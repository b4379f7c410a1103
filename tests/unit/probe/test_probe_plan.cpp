// The probe plan (options parsed once into a typed grid) and the tier choice, alone.
#include "doctest_torch.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "embcache/core/error.hpp"
#include "embcache/probe/probe_plan.hpp"
#include "embcache/probe/tier_choice.hpp"

using namespace embcache;

namespace {

ProbeOptions grid_options() {
  ProbeOptions o;
  o.caches = {"c.h5"};
  o.task = "classification";
  o.head = "linear,mlp";
  o.levels = "2,1+3";
  o.lr = "1e-3,1e-2";
  o.weight_decay = "0,0.05";
  o.device = "cpu";
  return o;
}

std::string usage_error(const ProbeOptions& o) {
  try {
    plan_probe(o);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

constexpr std::int64_t kMiB = std::int64_t(1) << 20;

}  // namespace

TEST_SUITE("probe") {

TEST_CASE("plan_probe: the grid is heads x level sets x lrs x weight decays, in that order, as numbers") {
  const ProbePlan plan = plan_probe(grid_options());
  REQUIRE(plan.grid.size() == 2 * 2 * 2 * 2);
  REQUIRE((plan.grid[0].head == HeadType::kLinear));
  REQUIRE(plan.grid[0].levels == std::vector<std::string>{"2"});
  REQUIRE(plan.grid[0].lr == 1e-3);
  REQUIRE(plan.grid[0].weight_decay == 0.0);
  REQUIRE(plan.grid[1].weight_decay == 0.05);
  REQUIRE(plan.grid[2].lr == 1e-2);
  REQUIRE(plan.grid[4].levels == std::vector<std::string>{"1", "3"});
  REQUIRE(plan.grid[4].levels_text() == "1+3");
  REQUIRE((plan.grid[8].head == HeadType::kMlp));
  REQUIRE(grid_heads_text(plan.grid) == "linear,mlp");
  REQUIRE(grid_levels_text(plan.grid) == "2,1+3");
  REQUIRE(grid_lrs_text(plan.grid) == "0.001,0.01");
  REQUIRE(grid_weight_decays_text(plan.grid) == "0,0.05");
  REQUIRE((plan.tier == TierRequest::kAuto));
  REQUIRE_FALSE(plan.host_budget.has_value());
  REQUIRE(plan.device == c10::Device(c10::kCPU));
  // A learning rate keeps every digit.
  ProbeOptions precise = grid_options();
  precise.lr = "0.0012345678901";
  REQUIRE(plan_probe(precise).grid[0].lr == 0.0012345678901);
}

TEST_CASE("plan_probe: each bad value is one UsageError naming its option") {
  auto with = [](auto change) {
    ProbeOptions o = grid_options();
    change(o);
    return usage_error(o);
  };
  REQUIRE(with([](ProbeOptions& o) { o.lr = "1e-3,fast"; }).rfind("--lr: expected a number", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.lr = "1e-3,0.001"; }).rfind("--lr: 0.001 is listed twice", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.lr = "-1"; }).rfind("--lr: learning rates must be positive", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.head = "linear,linear"; }).rfind("--head: linear is listed twice", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.levels = "1+1"; }).rfind("--levels: level 1 is listed twice in 1+1", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.tier = "disk"; }).rfind("--tier: expected auto, gpu, host or stream", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.tier = "gpu"; }).rfind("--tier: gpu needs a CUDA --device", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.host_memory_budget = "lots"; }).rfind("--host-memory-budget:", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.standardize = "maybe"; }).rfind("--standardize:", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.epochs = 0; }).rfind("--epochs:", 0) == 0);
  REQUIRE(with([](ProbeOptions& o) { o.task = "detection"; }).find("detection") != std::string::npos);
  REQUIRE(with([](ProbeOptions& o) { o.levels = ""; }).rfind("--levels: required", 0) == 0);
  // Fixed limits far above any real use: a slip is refused, not run for hours.
  CHECK(with([](ProbeOptions& o) { o.epochs = std::int64_t(1) << 31; }) == "--epochs: expected epochs from 1 to 100000, got 2147483648");
  CHECK(with([](ProbeOptions& o) { o.bootstrap = std::int64_t(1) << 31; }).rfind("--bootstrap: expected 0 (off) or resamples from 0 to 100000", 0) == 0);
  CHECK(with([](ProbeOptions& o) { o.threads = 100000; }).rfind("--threads: expected 0 (LibTorch's default) or a thread count from 0 to 4096", 0) == 0);
  CHECK(with([](ProbeOptions& o) { o.threads = -2; }).rfind("--threads:", 0) == 0);
  CHECK(with([](ProbeOptions& o) { o.patience = -1; }).rfind("--patience:", 0) == 0);
  CHECK(with([](ProbeOptions& o) { o.num_classes = std::int64_t(1) << 62; }).rfind("--num-classes:", 0) == 0);
  CHECK(with([](ProbeOptions& o) { o.batch_size = "2097152"; }).rfind("--batch-size:", 0) == 0);
  CHECK(with([](ProbeOptions& o) { o.hidden = "100000"; }).rfind("--hidden: expected widths from 1 to 65536", 0) == 0);
  CHECK(with([](ProbeOptions& o) { o.conv_blocks = 1000; }).rfind("--conv-blocks:", 0) == 0);
  CHECK(with([](ProbeOptions& o) { o.head = "knn"; o.lr = "1e-3"; o.weight_decay = "0"; o.k = "1000000"; }).rfind("--k: expected neighbours from 1 to 100000", 0) == 0);
  ProbeOptions budgets = grid_options();
  budgets.host_memory_budget = "512M";
  REQUIRE(plan_probe(budgets).host_budget == 512 * kMiB);
}

TEST_CASE("plan_probe: standardisation follows the head under auto, the option otherwise") {
  ProbeOptions o = grid_options();
  const ProbePlan automatic = plan_probe(o);
  REQUIRE(automatic.standardizes(HeadType::kLinear));
  REQUIRE(automatic.standardizes(HeadType::kPixelShuffle));
  REQUIRE_FALSE(automatic.standardizes(HeadType::kConv));
  o.standardize = "on";
  REQUIRE(plan_probe(o).standardizes(HeadType::kConv));
  o.standardize = "off";
  REQUIRE_FALSE(plan_probe(o).standardizes(HeadType::kLinear));
}

TEST_CASE("tier choice: GPU when the features fit its budget, else host, else a stream") {
  TierInputs in;
  in.row_bytes = kMiB;
  in.rows = 100;
  in.val_rows = 10;
  in.batch_size = 4;
  in.host_budget = 1000 * kMiB;
  REQUIRE((choose_tier(in).tier == FeedTier::kHost));
  REQUIRE(choose_tier(in).needed == 100 * kMiB);
  in.cuda = true;
  in.gpu_budget = 200 * kMiB;
  REQUIRE((choose_tier(in).tier == FeedTier::kGpu));
  in.gpu_budget = 50 * kMiB;
  REQUIRE((choose_tier(in).tier == FeedTier::kHost));  // too large for the GPU budget
  in.host_budget = 99 * kMiB;
  const TierChoice streamed = choose_tier(in);
  REQUIRE((streamed.tier == FeedTier::kStream));
  // Validation (10 MiB) fits a third of the budget: it stays in memory, the buffer shares the rest.
  REQUIRE((streamed.val_tier == FeedTier::kHost));
  REQUIRE(streamed.buffer_bytes == (99 * kMiB - 10 * kMiB) / 3);
  in.val_rows = 40;  // 40 MiB > a third of 99 MiB: streamed too, the buffer a third of the budget
  REQUIRE((choose_tier(in).val_tier == FeedTier::kStream));
  REQUIRE(choose_tier(in).buffer_bytes == 33 * kMiB);
}

TEST_CASE("tier choice: a budget that cannot hold what the request needs says what to raise") {
  TierInputs in;
  in.row_bytes = kMiB;
  in.rows = 100;
  in.batch_size = 4;
  in.host_budget = 50 * kMiB;
  in.request = TierRequest::kHost;
  REQUIRE_THROWS_WITH_AS(choose_tier(in), doctest::Contains("--tier: host: the features need 100.0 MiB"), UsageError);
  in.request = TierRequest::kGpu;
  in.cuda = true;
  in.gpu_budget = 10 * kMiB;
  REQUIRE_THROWS_WITH_AS(choose_tier(in), doctest::Contains("--tier: gpu: the features need"), UsageError);
  // Streaming needs a few batches in the budget; when holding everything would take less, say so.
  in.request = TierRequest::kAuto;
  in.cuda = false;
  in.rows = 20;
  in.batch_size = 4;
  in.host_budget = 16 * kMiB;  // 20 MiB needed resident, 32 MiB to stream
  REQUIRE_THROWS_WITH_AS(choose_tier(in), doctest::Contains("raise the budget to 20.0 MiB"), UsageError);
}

}  // TEST_SUITE

TEST_CASE("class weights: balanced is scikit-learn's N / (K n_c); inverse-sqrt averages 1 over rows" * doctest::test_suite("probe")) {
  const at::Tensor counts = at::tensor({10.0, 30.0, 0.0, 60.0}, at::kDouble);
  const at::Tensor balanced = weights_from_counts(ClassWeightMode::kBalanced, counts, 100, false).to(at::kDouble);
  // K = 3 classes present: 100 / (3 * n_c); the absent class gets 0.
  CHECK(at::allclose(balanced, at::tensor({100.0 / 30, 100.0 / 90, 0.0, 100.0 / 180}, at::kDouble), 1e-6));
  const at::Tensor sqrt_w = weights_from_counts(ClassWeightMode::kInverseSqrt, counts, 100, false).to(at::kDouble);
  CHECK((counts * sqrt_w).sum().item<double>() == doctest::Approx(100.0));
  CHECK(sqrt_w[0].item<double>() / sqrt_w[3].item<double>() == doctest::Approx(std::sqrt(6.0)));
  // Multilabel: positives weighted by negatives per positive.
  const at::Tensor pos = weights_from_counts(ClassWeightMode::kBalanced, at::tensor({25.0, 50.0}, at::kDouble), 100, true);
  CHECK(at::allclose(pos.to(at::kDouble), at::tensor({3.0, 1.0}, at::kDouble), 1e-6));
  CHECK_THROWS_WITH_AS(class_weight_modes().parse("auto", {"class-weights"}), doctest::Contains("--class-weights: expected none, balanced or inverse-sqrt"), UsageError);
  ProbeOptions o;
  o.out = "x";
  o.levels = "0";
  o.task = "regression";
  o.class_weights = "balanced";
  CHECK_THROWS_WITH_AS(plan_probe(o), doctest::Contains("--class-weights: applies to classification, multilabel and segmentation"), UsageError);
}

TEST_CASE("plan_probe: --train-fraction and --seeds multiply the grid, seeds innermost" * doctest::test_suite("probe")) {
  ProbeOptions o = grid_options();
  o.head = "linear";
  o.levels = "2";
  o.weight_decay = "0";
  o.train_fraction = "0.1,1";
  o.seeds = "3,4,5";
  const ProbePlan plan = plan_probe(o);
  REQUIRE(plan.grid.size() == 2 * 2 * 3);
  CHECK(plan.grid[0].lr == 1e-3);
  CHECK(plan.grid[0].train_fraction == 0.1);
  CHECK(plan.grid[0].seed == 3);
  CHECK(plan.grid[1].seed == 4);
  CHECK(plan.grid[3].train_fraction == 1.0);
  CHECK(plan.grid[6].lr == 1e-2);
  CHECK(grid_seed_count(plan.grid) == 3);
  CHECK((plan.seed_mode == SeedMode::kFull));
  // Without --seeds, every combination has --seed and the whole train split.
  ProbeOptions single = grid_options();
  single.seed = 7;
  for (const auto& c : plan_probe(single).grid) {
    CHECK(c.seed == 7);
    CHECK(c.train_fraction == 1.0);
  }
}

TEST_CASE("plan_probe: seeds and fractions that cannot work get one line each" * doctest::test_suite("probe")) {
  auto error_with = [](void (*set)(ProbeOptions&)) {
    ProbeOptions o = grid_options();
    set(o);
    return usage_error(o);
  };
  CHECK(error_with([](ProbeOptions& o) { o.seeds = "1,2,1"; }) == "--seeds: seed 1 is listed twice; list each value once");
  CHECK(error_with([](ProbeOptions& o) { o.seeds = "1,2", o.seed = 3; }) == "--seeds: give --seed or --seeds, not both");
  CHECK(error_with([](ProbeOptions& o) { o.seed_mode = "all"; }) == "--seed-mode: expected full or init, got \"all\"");
  CHECK(error_with([](ProbeOptions& o) { o.train_fraction = "0.5,0"; }) == "--train-fraction: expected fractions in (0, 1], got 0");
  CHECK(error_with([](ProbeOptions& o) { o.train_fraction = "1.2"; }) == "--train-fraction: expected fractions in (0, 1], got 1.2");
  CHECK(error_with([](ProbeOptions& o) { o.train_fraction = "0.1,0.1"; }) == "--train-fraction: 0.1 is listed twice; list each value once");
  CHECK(error_with([](ProbeOptions& o) { o.head = "knn", o.lr = "1e-3", o.weight_decay = "0", o.seeds = "0,1"; })
            .find("--seeds: knn does not depend on the seed") == 0);
  CHECK(error_with([](ProbeOptions& o) { o.head = "logreg", o.lr = "1e-3", o.weight_decay = "0", o.seeds = "0,1"; })
            .find("--seeds: logreg does not depend on the seed") == 0);
}

TEST_CASE("plan_probe: --batch-size auto is 64 rows for dense tasks and 256 otherwise" * doctest::test_suite("probe")) {
  ProbeOptions o = grid_options();
  CHECK(plan_probe(o).batch_size == 256);
  CHECK(resolved_options_json(plan_probe(o))["batch_size"] == 256);  // as run ids recorded it before "auto"
  o.task = "segmentation";
  o.head = "conv";
  o.levels = "2";
  CHECK(plan_probe(o).batch_size == 64);
  o.batch_size = "32";
  CHECK(plan_probe(o).batch_size == 32);
  for (const char* bad : {"0", "-4", "64x", "big"}) {
    o.batch_size = bad;
    CHECK(usage_error(o) == std::string("--batch-size: expected auto or a number of rows (at least 1), got \"") + bad + "\"");
  }
}
