#include "doctest_torch.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

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

}  // TEST_SUITE
