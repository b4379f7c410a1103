// How raw encoder outputs become stored levels: maps and vectors as they are, token sequences cut
// into a patch grid and a class token, channels-last maps turned channels-first, time axes kept.
// docs/encoders.md describes the rules for users; docs/cache-format.md the attributes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "embcache/encoder/encoder.hpp"
#include "embcache/core/level_origin.hpp"

namespace embcache {

// The options that settle how outputs are read (precompute's --patch-size and friends). Maps
// keyed by output name; the key "" applies to every output.
struct LayoutOptions {
  std::map<std::string, std::int64_t> patch_size;
  std::map<std::string, std::int64_t> prefix_tokens;
  bool keep_prefix_tokens = false;
  std::vector<std::string> channels_last;    // outputs [B, H, W, C]
  std::vector<std::string> temporal_tokens;  // 4-D outputs [B, T, N, D]
  bool time_axis = false;                    // the input is [B, T, C, h, w]
  bool any() const;
};

// A reading of N tokens for crops of h x w: N = prefix + time_steps * grid_h * grid_w.
struct TokenGrid {
  std::int64_t prefix = 0, patch = 0, grid_h = 0, grid_w = 0, time_steps = 1;
};
// The one reading that fits (docs/encoders.md, "Token levels"): with `patch` and/or `prefix`
// given (0 = not given), the reading they settle; else every prefix count K <= 8 and integer
// patch size p dividing h and w with at least 2 x 2 patches, and time_steps 1 or `time_steps`.
// InputError naming the output, N, the crop and the options that settle it when none or several fit.
TokenGrid token_grid(const std::string& output, std::int64_t tokens, std::int64_t h, std::int64_t w,
                     std::int64_t patch, std::int64_t prefix, std::int64_t time_steps);

struct StoredLevels {
  std::vector<std::string> names;
  std::vector<at::Tensor> levels;  // [B, C, H, W], [B, C], [B, T, C, H, W] or [B, T, C]
  std::vector<LevelOrigin> origins;
  std::vector<std::int64_t> output_index;  // position of the source output in the encoder's output
};

// The layout of one encoder's outputs, decided once from the first batch and applied to every batch.
class LevelLayout {
 public:
  // `input` is one batch as the encoder got it: [B, C, h, w] or [B, T, C, h, w]. InputError for
  // an output whose shape fits no reading; UsageError for options naming outputs that are absent.
  LevelLayout(const EncoderOutput& first, const at::Tensor& input, const LayoutOptions& options);
  // Every stored level of `out`, in output order, each output's derived levels after it.
  StoredLevels apply(const EncoderOutput& out) const;
  const std::vector<std::string>& names() const { return names_; }
  // The stored levels a --levels request names (stored names, or an output's index for its
  // main level), in request order; every level when empty. UsageError naming --levels for a
  // level there is not, or one listed twice.
  std::vector<std::size_t> select(const std::vector<std::string>& request) const;

 private:
  struct Output {
    std::string name;
    enum class Kind { kAsIs, kChannelsLast, kTokens, kTemporalTokens } kind = Kind::kAsIs;
    std::vector<std::int64_t> row_shape;  // as the encoder returns it
    TokenGrid grid;
    LevelOrigin origin;  // of its main level
  };
  // How output `name` (`t`, the first batch's) is stored: as it is, channels moved first, or
  // tokens on their patch grid. Errors as the constructor's.
  static Output read_output(const std::string& name, const at::Tensor& t, const at::Tensor& input,
                            const LayoutOptions& options);
  void apply_one(const Output& o, std::size_t index, const at::Tensor& t, StoredLevels& out) const;
  std::vector<Output> outputs_;
  std::vector<std::string> names_;
  std::vector<std::size_t> main_level_;  // output index -> its main stored level
  bool keep_prefix_ = false;
};

// The name of a token output's class token level, and of its other prefix tokens ("#" is not
// a character encoders put in dict keys).
std::string class_token_level(const std::string& output);
std::string prefix_token_level(const std::string& output, std::int64_t token);

}  // namespace embcache
