#include "doctest_torch.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "embcache/core/error.hpp"
#include "embcache/probe/heads.hpp"
#include "embcache/probe/run_outputs.hpp"
#include "test_support.hpp"

using namespace embcache;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("probe");

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

nlohmann::json run_metrics(const std::string& marker) {
  return {{"primary_metric", "accuracy"}, {"marker", marker}, {"history", nlohmann::json::array()}};
}

// Only the run's set (and nothing staged) is left in `dir`.
void require_only_the_set(const std::string& dir, bool head) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    CHECK_MESSAGE((name == "metrics.json" || name == "history.csv" || (head && name == "head.pt")), name);
  }
}

}  // namespace

TEST_CASE("a run directory is written as one set: a head that does not load back leaves the set that was there") {
  testing::TempDir dir;
  const std::string run = dir.file("run");
  HeadConfig config;
  config.task = ProbeTask::kClassification;
  config.levels = {"0"};
  config.level_shapes = {{6}};
  config.outputs = 3;
  const HeadBank bank(config, 1, 0, c10::Device(c10::kCPU));
  const auto save = [&bank](const std::string& path) { bank.save_member(0, path); };

  write_run_dir(run, run_metrics("first"), save, "--out");
  REQUIRE(nlohmann::json::parse(read_file(run + "/metrics.json"))["marker"] == "first");
  const std::string head = read_file(run + "/head.pt");
  REQUIRE_FALSE(head.empty());
  // The archive's root folder is named after head.pt, not after the staged file, so a rerun's
  // head is byte for byte the head of the same run saved anywhere else.
  CHECK(head.find("head.pt/data.pkl") != std::string::npos);
  CHECK(head.find(".staging") == std::string::npos);
  require_only_the_set(run, true);

  // A head that is written but does not load (a full disk truncates it): the run fails in one
  // line, and what was there stays, whole.
  const auto broken = [](const std::string& path) { std::ofstream(path, std::ios::binary) << "PK truncated"; };
  try {
    write_run_dir(run, run_metrics("second"), broken, "--out");
    FAIL("a head that does not load was accepted");
  } catch (const IoError& e) {
    const std::string message = e.what();
    CHECK(message.find("does not load back") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  CHECK(nlohmann::json::parse(read_file(run + "/metrics.json"))["marker"] == "first");
  CHECK(read_file(run + "/head.pt") == head);
  require_only_the_set(run, true);

  // A run without a head (diverged, or a streamed k-NN) leaves none of an earlier run's.
  write_run_dir(run, run_metrics("third"), nullptr, "--out");
  CHECK(nlohmann::json::parse(read_file(run + "/metrics.json"))["marker"] == "third");
  CHECK_FALSE(fs::exists(run + "/head.pt"));
  require_only_the_set(run, false);
}

TEST_SUITE_END();
