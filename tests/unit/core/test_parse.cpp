#include "doctest_torch.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"

using namespace embcache;

TEST_SUITE("core") {

TEST_CASE("exact_number_text reads back as the same double, spelled as format_number where that is exact") {
  // Values a study writes every day keep the text they had, so run ids made from it stay.
  REQUIRE(exact_number_text(0.001) == "0.001");
  REQUIRE(exact_number_text(1e-4) == "0.0001");
  REQUIRE(exact_number_text(1e-5) == "1e-05");
  REQUIRE(exact_number_text(2.0) == "2");
  REQUIRE(exact_number_text(0.00392157) == "0.00392157");
  REQUIRE(exact_number_text(-7.5) == "-7.5");
  // What format_number cut to 6 digits keeps every digit now.
  REQUIRE(format_number(1370.19151926) == "1370.19");
  REQUIRE(exact_number_text(1370.19151926) == "1370.19151926");
  REQUIRE(exact_number_text(0.1 + 0.2) == "0.30000000000000004");
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> uniform(-1e4, 1e4);
  for (int i = 0; i < 2000; ++i) {
    const double v = uniform(random) * std::pow(10.0, double(int(random() % 20)) - 10.0);
    REQUIRE(std::strtod(exact_number_text(v).c_str(), nullptr) == v);
    REQUIRE(parse_double(exact_number_text(v), {"x"}) == v);
  }
  REQUIRE(std::strtod(exact_number_text(std::numeric_limits<double>::denorm_min()).c_str(), nullptr) ==
          std::numeric_limits<double>::denorm_min());
}

  TEST_CASE("byte sizes parse with binary units and reject nonsense") {
    CHECK(parse_bytes("512M", {"x"}) == 512ll << 20);
    CHECK(parse_bytes("1.5GiB", {"x"}) == 3ll << 29);
    CHECK(parse_bytes("4096", {"x"}) == 4096);
    CHECK_THROWS_AS(parse_bytes("lots", {"host-memory-budget"}), UsageError);
    CHECK_THROWS_AS(parse_bytes("-1G", {"host-memory-budget"}), UsageError);
  }

  TEST_CASE("durations for progress lines read as seconds, minutes or hours") {
    CHECK(format_duration(0) == "0s");
    CHECK(format_duration(42.4) == "42s");
    CHECK(format_duration(725) == "12m05s");
    CHECK(format_duration(10980) == "3h03m");
    CHECK(format_duration(-3) == "0s");
  }

  TEST_CASE("crop sizes parse as S or WxH and name the expected form otherwise") {
    CHECK(parse_size("64", {"crop-size"}) == std::pair<std::int64_t, std::int64_t>(64, 64));
    CHECK(parse_size("64x32", {"crop-size"}) == std::pair<std::int64_t, std::int64_t>(64, 32));
    for (const char* bad : {"64x", "x32", "10x20x3", "big"}) {
      CHECK_THROWS_WITH_AS(parse_size(bad, {"crop-size"}),
                           ("--crop-size: expected S or WxH (64 or 64x32), got \"" + std::string(bad) + "\"").c_str(),
                           UsageError);
    }
    CHECK_THROWS_WITH_AS(parse_size("0x8", {"crop-size"}), "--crop-size: sizes must be positive, got \"0x8\"", UsageError);
  }
}  // TEST_SUITE
