// Probe metrics against hand-computed values, schedules, byte sizes, and head banks whose members
// match lone heads.
#include "doctest_torch.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/probe/heads.hpp"
#include "embcache/probe/metrics.hpp"
#include "embcache/probe/optimizer.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("probe");

namespace {

// Logits [1, B, K] that predict `pred` for each row.
at::Tensor logits_for(const std::vector<std::int64_t>& pred, std::int64_t k) {
  at::Tensor out = at::zeros({1, std::int64_t(pred.size()), k});
  for (std::size_t i = 0; i < pred.size(); ++i) out[0][std::int64_t(i)][pred[i]] = 1.0;
  return out;
}

}  // namespace

TEST_CASE("probe metrics: top-5 accuracy only with more than 5 classes") {
  // Logits rank the classes 0, 1, ..., k-1 for every row: with 6 classes, 5 is never in the top 5.
  const auto ranked = [](std::int64_t rows, std::int64_t k) {
    return at::arange(k, at::kFloat).flip(0).view({1, 1, k}).expand({1, rows, k}).contiguous();
  };
  MetricAccumulator six(ProbeTask::kClassification, 6, -1, 1);
  six.add(ranked(4, 6), at::tensor(std::vector<std::int64_t>{0, 1, 2, 5}));
  CHECK(six.result(0)["top5_accuracy"].get<double>() == doctest::Approx(0.75));
  MetricAccumulator five(ProbeTask::kClassification, 5, -1, 1);
  five.add(ranked(4, 5), at::tensor(std::vector<std::int64_t>{0, 1, 2, 4}));
  CHECK(!five.result(0).contains("top5_accuracy"));  // always 1 with 5 classes
}

TEST_CASE("probe metrics: classification accuracy, macro-F1, recall and confusion by hand") {
  // targets 0 0 1 1 2, predictions 0 1 1 1 0: accuracy 3/5.
  MetricAccumulator acc(ProbeTask::kClassification, 3, -1, 1);
  acc.add(logits_for({0, 1, 1, 1, 0}, 3), at::tensor(std::vector<std::int64_t>{0, 0, 1, 1, 2}));
  const auto m = acc.result(0);
  CHECK(m["accuracy"].get<double>() == doctest::Approx(0.6));
  // F1: class 0: tp 1 fp 1 fn 1 -> 0.5; class 1: tp 2 fp 1 fn 0 -> 0.8; class 2: 0.
  CHECK(m["macro_f1"].get<double>() == doctest::Approx((0.5 + 0.8 + 0.0) / 3));
  CHECK(m["per_class_recall"][0].get<double>() == doctest::Approx(0.5));
  CHECK(m["per_class_recall"][1].get<double>() == doctest::Approx(1.0));
  CHECK(m["confusion_matrix"] == nlohmann::json({{1, 1, 0}, {0, 2, 0}, {1, 0, 0}}));
  CHECK(!m.contains("top5_accuracy"));  // fewer than 5 classes
  CHECK(acc.primary(0) == doctest::Approx(0.6));
  const auto ci = acc.bootstrap(0, 200, 1);
  CHECK(ci["accuracy"][0].get<double>() <= 0.6);
  CHECK(ci["accuracy"][1].get<double>() >= 0.6);
}

TEST_CASE("probe metrics: segmentation mIoU excludes the ignore index") {
  MetricAccumulator acc(ProbeTask::kSegmentation, 2, 255, 1);
  // One 2x2 crop: target [[0, 1], [1, 255]], prediction [[0, 1], [0, 1]].
  at::Tensor out = at::zeros({1, 1, 2, 2, 2});
  out[0][0][0][0][0] = 1;  // pixel (0,0) -> 0
  out[0][0][1][0][1] = 1;  // pixel (0,1) -> 1
  out[0][0][0][1][0] = 1;  // pixel (1,0) -> 0
  out[0][0][1][1][1] = 1;  // pixel (1,1) -> 1 (ignored)
  acc.add(out, at::tensor(std::vector<std::int32_t>{0, 1, 1, 255}).view({1, 2, 2}));
  const auto m = acc.result(0);
  // class 0: tp 1, fp 1, fn 0 -> IoU 1/2; class 1: tp 1, fp 0, fn 1 -> 1/2.
  CHECK(m["miou"].get<double>() == doctest::Approx(0.5));
  CHECK(m["pixel_accuracy"].get<double>() == doctest::Approx(2.0 / 3.0));
  CHECK(m["confusion_matrix"] == nlohmann::json({{1, 0}, {1, 1}}));
}

TEST_CASE("probe metrics: regression MAE, RMSE and R2; multilabel mAP") {
  MetricAccumulator reg(ProbeTask::kRegression, 1, -1, 1);
  reg.add(at::tensor(std::vector<float>{1, 2, 4}).view({1, 3, 1}), at::tensor(std::vector<float>{1, 3, 3}).view({3, 1}));
  const auto r = reg.result(0);
  CHECK(r["mae"].get<double>() == doctest::Approx(2.0 / 3.0));
  CHECK(r["rmse"].get<double>() == doctest::Approx(std::sqrt(2.0 / 3.0)));
  // targets 1 3 3: mean 7/3, SS_tot = 16/9 + 4/9 + 4/9 = 8/3; SS_res = 2.
  CHECK(r["r2"].get<double>() == doctest::Approx(1.0 - 2.0 / (8.0 / 3.0)));

  MetricAccumulator ml(ProbeTask::kMultilabel, 1, -1, 1);
  // scores (logits) 3, 2, 1 with labels 1, 0, 1: AP = (1/1 + 2/3) / 2.
  ml.add(at::tensor(std::vector<float>{3, 2, 1}).view({1, 3, 1}), at::tensor(std::vector<float>{1, 0, 1}).view({3, 1}));
  CHECK(ml.result(0)["map"].get<double>() == doctest::Approx((1.0 + 2.0 / 3.0) / 2.0));
}

TEST_CASE("learning-rate schedules: warm-up, cosine, step") {
  CHECK(schedule_factor(Schedule::kConstant, 5, 10, 0) == 1.0);
  CHECK(schedule_factor(Schedule::kCosine, 0, 10, 0) == doctest::Approx(1.0));
  CHECK(schedule_factor(Schedule::kCosine, 5, 10, 0) == doctest::Approx(0.5));
  CHECK(schedule_factor(Schedule::kCosine, 1, 10, 4) == doctest::Approx(0.4));  // warm-up: 2/5
  CHECK(schedule_factor(Schedule::kStep, 7, 10, 0) == doctest::Approx(0.1));
  CHECK(schedule_factor(Schedule::kStep, 9, 10, 0) == doctest::Approx(0.01));
}

TEST_CASE("bank optimizers: one AdamW and one SGD step by hand; inactive members do not move") {
  // Three members of two elements, gradient 0.5 everywhere; member 1 is inactive. float32 on the
  // CPU takes the fused loop; float64 the tensor expressions used on the GPU: both must agree.
  const std::vector<bool> active = {true, false, true};
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    INFO("dtype " << c10::toString(dtype));
    auto make = [dtype] {
      at::Tensor p = at::ones({3, 2}, at::TensorOptions().dtype(dtype)).requires_grad_(true);
      p.mutable_grad() = at::full({3, 2}, 0.5, at::TensorOptions().dtype(dtype));
      return p;
    };
    // AdamW: after bias correction the first step is lr * sign(grad), plus decoupled decay.
    at::Tensor p = make();
    BankOptimizer adamw(OptimizerKind::kAdamW, {p}, {0.1, 0.1, 0.01}, {0.01, 0.01, 0.0});
    adamw.step(1.0, active);
    CHECK(p[0][0].item<double>() == doctest::Approx(1.0 * (1 - 0.1 * 0.01) - 0.1).epsilon(1e-6));
    CHECK(p[1][1].item<double>() == 1.0);
    CHECK(p[2][1].item<double>() == doctest::Approx(1.0 - 0.01).epsilon(1e-6));

    // SGD with momentum 0.9: the buffer starts at grad + decay * p.
    p = make();
    BankOptimizer sgd(OptimizerKind::kSgd, {p}, {0.1, 0.1, 0.01}, {0.01, 0.01, 0.0});
    sgd.step(0.5, active);  // schedule factor 0.5
    const double p1 = 1.0 - 0.05 * 0.51;
    CHECK(p[0][1].item<double>() == doctest::Approx(p1).epsilon(1e-6));
    CHECK(p[1][0].item<double>() == 1.0);
    CHECK(p[2][0].item<double>() == doctest::Approx(1.0 - 0.005 * 0.5).epsilon(1e-6));
    sgd.step(0.5, active);
    CHECK(p[0][1].item<double>() == doctest::Approx(p1 - 0.05 * (0.9 * 0.51 + 0.5 + 0.01 * p1)).epsilon(1e-6));
  }
}

TEST_CASE("head banks: every member of a linear bank trains exactly like a lone head") {
  HeadConfig config;
  config.task = ProbeTask::kClassification;
  config.levels = {"0"};
  config.level_shapes = {{6, 3, 3}};
  config.outputs = 4;
  HeadBank bank(config, 3, 7, c10::Device(c10::kCPU));
  HeadBank alone(config, 1, 7, c10::Device(c10::kCPU));
  BankOptimizer opt_bank(OptimizerKind::kAdamW, bank.parameters(), {1e-3, 1e-2, 1e-1}, {0, 1e-2, 0});
  BankOptimizer opt_alone(OptimizerKind::kAdamW, alone.parameters(), {1e-2}, {1e-2});
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (int step = 0; step < 5; ++step) {
    const at::Tensor x = at::randn({8, 6, 3, 3}, gen);
    const at::Tensor y = at::randint(4, {8}, gen, at::kLong);
    for (auto* pair : {&bank, &alone}) {
      const at::Tensor out = pair->forward({x}, true);
      const std::int64_t g = out.size(0);
      at::cross_entropy_loss(out.reshape({g * 8, 4}), y.repeat({g}), {}, at::Reduction::None).view({g, 8}).mean(1).sum().backward();
    }
    opt_bank.step(0.5, {true, true, true});
    opt_alone.step(0.5, {true});
    opt_bank.zero_grad();
    opt_alone.zero_grad();
  }
  const auto a = bank.member_state(1), b = alone.member_state(0);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(at::allclose(a[i], b[i], 0, 1e-7));
  // A member that is not active does not move.
  const auto before = bank.member_state(0);
  bank.forward({at::randn({8, 6, 3, 3}, gen)}, true).sum().backward();
  opt_bank.step(1.0, {false, true, true});
  const auto after = bank.member_state(0);
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(at::equal(before[i], after[i]));
}

TEST_CASE("head configs refuse architectures that cannot work on the levels") {
  HeadConfig config;
  config.task = ProbeTask::kSegmentation;
  config.levels = {"0"};
  config.level_shapes = {{8, 5, 5}};
  config.outputs = 3;
  config.out_size = {16, 16};
  config.type = HeadType::kPixelShuffle;
  CHECK_THROWS_AS(config.validate(), UsageError);  // 16 is not a multiple of 5
  config.out_size = {20, 20};
  CHECK_NOTHROW(config.validate());
  config.type = HeadType::kMlp;
  CHECK_THROWS_AS(config.validate(), UsageError);
  config.type = HeadType::kFpn;
  CHECK_THROWS_AS(config.validate(), UsageError);  // one level
  config.task = ProbeTask::kClassification;
  config.type = HeadType::kConv;
  config.level_shapes = {{8}};
  CHECK_THROWS_AS(config.validate(), UsageError);  // a vector level
}

TEST_SUITE_END();
