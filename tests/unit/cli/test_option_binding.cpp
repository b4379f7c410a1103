#include "doctest_torch.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "embcache/cli/option_binding.hpp"
#include "embcache/pipeline/precompute_options.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("cli");

TEST_CASE("command-line flags: --no-fsync turns fsync off, and --help shows it plainly") {
  const auto parse = [](std::vector<std::string> args) {
    CLI::App app("test");
    auto options = std::make_shared<PrecomputeOptions>();
    add_option_fields(app.add_subcommand("precompute"), options, precompute_fields());
    args.insert(args.begin(), {"precompute", "--encoder", "e.pt", "--dataset", "d.h5", "--out", "c.h5"});
    std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
    app.parse(args);
    return *options;
  };
  CHECK(parse({}).fsync);
  CHECK_FALSE(parse({"--no-fsync"}).fsync);
  CHECK(parse({"--drop-behind"}).drop_behind);
  CLI::App app("test");
  auto options = std::make_shared<PrecomputeOptions>();
  CLI::App* sub = app.add_subcommand("precompute");
  add_option_fields(sub, options, precompute_fields());
  const std::string help = sub->help();
  CHECK(help.find("--no-fsync ") != std::string::npos);
  CHECK(help.find("{false}") == std::string::npos);
}

TEST_SUITE_END();
