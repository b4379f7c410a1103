#include "doctest_torch.hpp"

#include <ATen/ATen.h>

#include "embcache/core/error.hpp"
#include "embcache/encoder/level_layout.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("encoder");

namespace {

std::string grid_error(std::int64_t tokens, std::int64_t h, std::int64_t w, std::int64_t patch = 0, std::int64_t prefix = 0) {
  try {
    token_grid("0", tokens, h, w, patch, prefix, 0);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

EncoderOutput outputs(std::vector<std::pair<std::string, at::Tensor>> named) {
  EncoderOutput out;
  for (auto& [name, t] : named) {
    out.names.push_back(name);
    out.levels.push_back(t);
  }
  return out;
}

}  // namespace

TEST_CASE("the patch grid is inferred when exactly one reading fits the crop") {
  auto check = [](std::int64_t tokens, std::int64_t h, std::int64_t w, TokenGrid want, std::int64_t steps = 0) {
    const TokenGrid g = token_grid("0", tokens, h, w, 0, 0, steps);
    INFO(tokens << " tokens, " << w << "x" << h);
    CHECK(g.prefix == want.prefix);
    CHECK(g.patch == want.patch);
    CHECK(g.grid_h == want.grid_h);
    CHECK(g.grid_w == want.grid_w);
    CHECK(g.time_steps == want.time_steps);
  };
  check(197, 224, 224, {1, 16, 14, 14, 1});       // ViT-B/16
  check(201, 224, 224, {5, 16, 14, 14, 1});       // + 4 registers
  check(257, 224, 224, {1, 14, 16, 16, 1});       // DINOv2 patch 14
  check(196, 224, 224, {0, 16, 14, 14, 1});       // patch tokens only
  check(25, 64, 96, {1, 16, 4, 6, 1});            // not square: 64 high, 96 wide
  check(1 + 3 * 196, 224, 224, {1, 16, 14, 14, 3}, 3);  // Prithvi: T x h x w, flattened
}

TEST_CASE("token counts that fit no grid or several are one error naming N, the crop and the options") {
  const std::string none = grid_error(13, 16, 16);
  CHECK(none.find("encoder output 0 has 13 tokens for 16x16 crops, which fits no patch grid") != std::string::npos);
  CHECK(none.find("--patch-size P and --prefix-tokens K") != std::string::npos);
  const std::string several = grid_error(16, 12, 12);
  CHECK(several.find("fits more than one patch grid (0 prefix tokens + 4x4 patches of 3 px; 7 prefix tokens + 3x3 "
                     "patches of 4 px)") != std::string::npos);
  // Either option settles it.
  CHECK(token_grid("0", 16, 12, 12, 3, 0, 0).prefix == 0);
  CHECK(token_grid("0", 16, 12, 12, 0, 7, 0).patch == 4);
  // A given patch size allows any prefix count; one that does not cut the crop is a usage error.
  CHECK(token_grid("0", 16 + 12, 16, 16, 4, 0, 0).prefix == 12);
  CHECK_THROWS_AS(token_grid("0", 16, 12, 12, 5, 0, 0), UsageError);
  CHECK(grid_error(16, 12, 12, 4, 3).find("with --patch-size 4 and --prefix-tokens 3") != std::string::npos);
  CHECK(grid_error(1, 8, 8).find("fits no patch grid") != std::string::npos);  // 1x1 is no grid
}

TEST_CASE("token outputs become a patch map in row-major order and a class token; registers on request") {
  const at::Tensor tokens = at::randn({2, 5 + 16, 7});  // class + 4 registers + 4x4 patches
  const at::Tensor input = at::zeros({2, 3, 32, 32});
  for (bool keep : {false, true}) {
    LayoutOptions options;
    options.keep_prefix_tokens = keep;
    const EncoderOutput out = outputs({{"blk", tokens}});
    const LevelLayout layout(out, input, options);
    const StoredLevels s = layout.apply(out);
    std::vector<std::string> want{"blk", "blk#cls"};
    if (keep) want.insert(want.end(), {"blk#prefix1", "blk#prefix2", "blk#prefix3", "blk#prefix4"});
    REQUIRE(s.names == want);
    REQUIRE(layout.names() == want);
    const at::Tensor python = tokens.slice(1, 5).reshape({2, 4, 4, 7}).permute({0, 3, 1, 2});
    CHECK(at::equal(s.levels[0], python));
    CHECK(s.levels[0].is_contiguous());
    CHECK(at::equal(s.levels[1], tokens.select(1, 0)));
    CHECK((s.origins[0].source == LevelSource::kPatchTokens));
    CHECK(s.origins[0].patch_size == 8);
    CHECK(s.origins[0].prefix_tokens == 5);
    CHECK((s.origins[1].source == LevelSource::kClassToken));
    CHECK(s.origins[1].token == 0);
    if (keep) {
      CHECK(at::equal(s.levels[5], tokens.select(1, 4)));
      CHECK((s.origins[5].source == LevelSource::kPrefixToken));
    }
    for (const auto& o : s.origins) CHECK(o.needs_format_2());
  }
}

TEST_CASE("channels-last maps are turned, time axes kept, temporal tokens cut per step") {
  const at::Tensor input = at::zeros({2, 3, 4, 16, 16});  // [B, T, C, h, w]
  const at::Tensor nhwc = at::randn({2, 8, 8, 6});
  const at::Tensor maps5 = at::randn({2, 3, 6, 8, 8});
  const at::Tensor per_step = at::randn({2, 3, 1 + 4, 5});          // [B, T, N, D], 2x2 patches of 8
  const at::Tensor flat = at::randn({2, 1 + 3 * 4, 5});             // [B, K + T*h*w, D]
  LayoutOptions options;
  options.channels_last = {"nhwc"};
  options.temporal_tokens = {"steps"};
  options.time_axis = true;
  const EncoderOutput out = outputs({{"nhwc", nhwc}, {"maps", maps5}, {"steps", per_step}, {"flat", flat}});
  const LevelLayout layout(out, input, options);
  const StoredLevels s = layout.apply(out);
  REQUIRE(s.names == std::vector<std::string>{"nhwc", "maps", "steps", "steps#cls", "flat", "flat#cls"});
  CHECK(at::equal(s.levels[0], nhwc.permute({0, 3, 1, 2})));
  CHECK(s.origins[0].needs_format_2());
  CHECK(at::equal(s.levels[1], maps5));
  CHECK(s.origins[1].time_steps == 3);
  CHECK(at::equal(s.levels[2], per_step.slice(2, 1).reshape({2, 3, 2, 2, 5}).permute({0, 1, 4, 2, 3})));
  CHECK(at::equal(s.levels[3], per_step.select(2, 0)));
  CHECK(s.origins[3].time_steps == 3);
  CHECK(at::equal(s.levels[4], flat.slice(1, 1).reshape({2, 3, 2, 2, 5}).permute({0, 1, 4, 2, 3})));
  CHECK(s.origins[4].time_steps == 3);
  CHECK(s.origins[5].time_steps == 0);  // one class token for the whole series
  // Plain maps and vectors stay format 1.
  const EncoderOutput plain = outputs({{"0", at::randn({2, 4, 8, 8})}, {"1", at::randn({2, 4})}});
  const StoredLevels p = LevelLayout(plain, at::zeros({2, 3, 16, 16}), {}).apply(plain);
  CHECK_FALSE(p.origins[0].needs_format_2());
  CHECK((p.origins[1].source == LevelSource::kVector));
}

TEST_CASE("levels are selected by stored name or by output index; options naming absent outputs are refused") {
  const EncoderOutput out = outputs({{"a", at::randn({1, 17, 4})}, {"b", at::randn({1, 4})}});
  const LevelLayout layout(out, at::zeros({1, 3, 32, 32}), {});
  CHECK(layout.select({}) == std::vector<std::size_t>{0, 1, 2});
  CHECK(layout.select({"a#cls", "1"}) == std::vector<std::size_t>{1, 2});
  CHECK(layout.select({"0"}) == std::vector<std::size_t>{0});
  CHECK_THROWS_WITH_AS(layout.select({"c"}), doctest::Contains("no level \"c\"; it returns 3 levels: a,a#cls,b"), UsageError);
  CHECK_THROWS_WITH_AS(layout.select({"a", "0"}), doctest::Contains("listed twice"), UsageError);
  LayoutOptions bad;
  bad.channels_last = {"z"};
  CHECK_THROWS_WITH_AS(LevelLayout(out, at::zeros({1, 3, 32, 32}), bad), doctest::Contains("no output \"z\""), UsageError);
  bad = {};
  bad.channels_last = {"b"};
  CHECK_THROWS_WITH_AS(LevelLayout(out, at::zeros({1, 3, 32, 32}), bad), doctest::Contains("it names 4-D outputs"), UsageError);
  // A later batch with another token count is an error, not a silent reshape.
  const EncoderOutput later = outputs({{"a", at::randn({1, 18, 4})}, {"b", at::randn({1, 4})}});
  CHECK_THROWS_WITH_AS(layout.apply(later), doctest::Contains("changed shape between batches"), InputError);
}

TEST_SUITE_END();
