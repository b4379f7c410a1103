#include "embcache/encoder/level_layout.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>

#include "embcache/core/error.hpp"

namespace embcache {
namespace {

constexpr std::int64_t kMaxInferredPrefix = 8;

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::int64_t lookup(const std::map<std::string, std::int64_t>& values, const std::string& output) {
  if (auto it = values.find(output); it != values.end()) return it->second;
  if (auto it = values.find(""); it != values.end()) return it->second;
  return 0;
}

std::string shape_text(const at::Tensor& t) { return std::string(c10::str(t.sizes())); }

std::string describe(const TokenGrid& g) {
  std::string s = std::to_string(g.prefix) + " prefix token" + (g.prefix == 1 ? "" : "s") + " + ";
  if (g.time_steps > 1) s += std::to_string(g.time_steps) + " x ";
  return s + std::to_string(g.grid_h) + "x" + std::to_string(g.grid_w) + " patches of " + std::to_string(g.patch) + " px";
}

// Every reading of `tokens` that the given values (0 = free) allow.
std::vector<TokenGrid> readings(std::int64_t tokens, std::int64_t h, std::int64_t w, std::int64_t patch, std::int64_t prefix,
                                std::int64_t time_steps) {
  std::vector<std::int64_t> steps{1};
  if (time_steps > 1) steps.push_back(time_steps);
  std::vector<TokenGrid> found;
  for (std::int64_t p = patch ? patch : 1; p <= (patch ? patch : std::min(h, w) / 2); ++p) {
    if (h % p != 0 || w % p != 0 || h / p < 2 || w / p < 2) continue;
    for (std::int64_t t : steps) {
      const std::int64_t k = tokens - t * (h / p) * (w / p);
      const bool prefix_ok = prefix ? k == prefix : (k >= 0 && (patch ? true : k <= kMaxInferredPrefix));
      if (prefix_ok) found.push_back({k, p, h / p, w / p, t});
    }
  }
  return found;
}

}  // namespace

bool LayoutOptions::any() const {
  return !patch_size.empty() || !prefix_tokens.empty() || keep_prefix_tokens || !channels_last.empty() ||
         !temporal_tokens.empty() || time_axis;
}

std::string class_token_level(const std::string& output) { return output + "#cls"; }
std::string prefix_token_level(const std::string& output, std::int64_t token) {
  return output + "#prefix" + std::to_string(token);
}

TokenGrid token_grid(const std::string& output, std::int64_t tokens, std::int64_t h, std::int64_t w, std::int64_t patch,
                     std::int64_t prefix, std::int64_t time_steps) {
  const std::string crop = std::to_string(w) + "x" + std::to_string(h);
  const std::string what = "encoder output " + output + " has " + std::to_string(tokens) + " tokens for " + crop + " crops";
  if (patch && (h % patch != 0 || w % patch != 0 || h / patch < 2 || w / patch < 2)) {
    throw UsageError(OptionName{"patch-size"}, std::to_string(patch) + " does not cut the " + crop +
                     " crops into whole patches (at least 2x2); choose a patch size that divides the crop size");
  }
  const std::vector<TokenGrid> found = readings(tokens, h, w, patch, prefix, time_steps);
  if (found.size() == 1) return found.front();
  if (found.empty()) {
    std::string rule = patch || prefix ? std::string("with ") +
                                             (patch ? "--patch-size " + std::to_string(patch) : "") +
                                             (patch && prefix ? " and " : "") +
                                             (prefix ? "--prefix-tokens " + std::to_string(prefix) : "")
                                       : "N - K = " + std::string(time_steps > 1 ? "(1 or T) * " : "") +
                                             "(h/p) * (w/p) holds for no prefix count K <= 8 and patch size p that "
                                             "cuts the crop into at least 2x2 whole patches";
    throw InputError(what + ", which fits no patch grid (" + rule + "); check --crop-size, pass --patch-size P and "
                     "--prefix-tokens K, or return [B, C, H, W] maps");
  }
  std::string options;
  for (const auto& g : found) options += (options.empty() ? "" : "; ") + describe(g);
  throw InputError(what + ", which fits more than one patch grid (" + options + "); pass --patch-size P or "
                   "--prefix-tokens K to settle it");
}

namespace {

// UsageError for a layout option that names an output the encoder does not return.
void check_options_name_outputs(const std::vector<std::string>& outputs, const LayoutOptions& options) {
  auto check_named = [&](const std::vector<std::string>& names, const char* option) {
    for (const auto& n : names) {
      if (n.empty() || listed(outputs, n)) continue;
      std::string available;
      for (const auto& o : outputs) available += (available.empty() ? "" : ",") + o;
      throw UsageError(OptionName{option}, "the encoder has no output \"" + n + "\"; it returns " + available);
    }
  };
  auto keys_of = [](const std::map<std::string, std::int64_t>& values) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : values) keys.push_back(k);
    return keys;
  };
  check_named(options.channels_last, "channels-last");
  check_named(options.temporal_tokens, "temporal-tokens");
  check_named(keys_of(options.patch_size), "patch-size");
  check_named(keys_of(options.prefix_tokens), "prefix-tokens");
}

}  // namespace

LevelLayout::LevelLayout(const EncoderOutput& first, const at::Tensor& input, const LayoutOptions& options)
    : keep_prefix_(options.keep_prefix_tokens) {
  check_options_name_outputs(first.names, options);
  for (std::size_t i = 0; i < first.levels.size(); ++i) {
    Output o = read_output(first.names[i], first.levels[i], input, options);
    main_level_.push_back(names_.size());
    names_.push_back(o.name);
    const bool tokens = o.kind == Output::Kind::kTokens || o.kind == Output::Kind::kTemporalTokens;
    if (tokens && o.grid.prefix > 0) names_.push_back(class_token_level(o.name));
    if (tokens && keep_prefix_) {
      for (std::int64_t k = 1; k < o.grid.prefix; ++k) names_.push_back(prefix_token_level(o.name, k));
    }
    outputs_.push_back(std::move(o));
  }
  for (std::size_t a = 0; a < names_.size(); ++a) {
    for (std::size_t b = a + 1; b < names_.size(); ++b) {
      if (names_[a] == names_[b]) {
        throw InputError("encoder outputs give two levels named \"" + names_[a] + "\"; rename the encoder's dict key");
      }
    }
  }
}

LevelLayout::Output LevelLayout::read_output(const std::string& name, const at::Tensor& t, const at::Tensor& input,
                                             const LayoutOptions& options) {
  Output o;
  o.name = name;
  o.row_shape.assign(t.sizes().begin() + 1, t.sizes().end());
  o.origin.output = o.name;
  const bool last = listed(options.channels_last, o.name), temporal = listed(options.temporal_tokens, o.name);
  if ((last || temporal) && t.dim() != 4) {
    throw UsageError(OptionName{last ? "channels-last" : "temporal-tokens"},
                     "output " + o.name + " is " + shape_text(t) + "; it names 4-D outputs (" +
                     (last ? "[B, H, W, C]" : "[B, T, N, D]") + ")");
  }
  if (t.dim() == 2) {
    o.origin.source = LevelSource::kVector;
  } else if (t.dim() == 3 || temporal) {
    o.kind = t.dim() == 3 ? Output::Kind::kTokens : Output::Kind::kTemporalTokens;
    const std::int64_t tokens = t.size(t.dim() - 2);
    const std::int64_t time_steps = input.dim() == 5 ? input.size(1) : 0;
    o.grid = token_grid(o.name, tokens, input.size(-2), input.size(-1), lookup(options.patch_size, o.name),
                        lookup(options.prefix_tokens, o.name), t.dim() == 3 ? time_steps : 0);
    o.origin.source = LevelSource::kPatchTokens;
    o.origin.patch_size = o.grid.patch;
    o.origin.prefix_tokens = o.grid.prefix;
    o.origin.time_steps = temporal ? t.size(1) : (o.grid.time_steps > 1 ? o.grid.time_steps : 0);
  } else if (last) {
    o.kind = Output::Kind::kChannelsLast;
    o.origin.source = LevelSource::kChannelsLast;
  } else if (t.dim() == 5) {
    o.origin.time_steps = t.size(1);
  }
  return o;
}

void LevelLayout::apply_one(const Output& o, std::size_t index, const at::Tensor& t, StoredLevels& out) const {
  auto push = [&](const std::string& name, at::Tensor level, LevelOrigin origin) {
    out.names.push_back(name);
    out.levels.push_back(std::move(level));
    out.origins.push_back(std::move(origin));
    out.output_index.push_back(std::int64_t(index));
  };
  if (std::vector<std::int64_t>(t.sizes().begin() + 1, t.sizes().end()) != o.row_shape) {
    std::string planned = "[B";
    for (auto d : o.row_shape) planned += ", " + std::to_string(d);
    throw InputError("encoder output " + o.name + " changed shape between batches: " + planned + "] then " + shape_text(t) +
                     "; every crop must give the same feature shape");
  }
  if (o.kind == Output::Kind::kAsIs) return push(o.name, t, o.origin);
  if (o.kind == Output::Kind::kChannelsLast) return push(o.name, t.permute({0, 3, 1, 2}).contiguous(), o.origin);
  // Tokens: [B, N, D], or [B, T, N, D] for temporal tokens. Patches follow the prefix in
  // row-major order (as ViTs flatten their patch grid), time steps outermost when flattened.
  const bool temporal = o.kind == Output::Kind::kTemporalTokens;
  const std::int64_t b = t.size(0), d = t.size(-1), axis = temporal ? 2 : 1;
  const std::int64_t steps = temporal ? t.size(1) : o.grid.time_steps;
  const TokenGrid& g = o.grid;
  at::Tensor patches = t.narrow(axis, g.prefix, t.size(axis) - g.prefix);
  if (temporal || steps > 1) {
    patches = patches.reshape({b, steps, g.grid_h, g.grid_w, d}).permute({0, 1, 4, 2, 3});
  } else {
    patches = patches.reshape({b, g.grid_h, g.grid_w, d}).permute({0, 3, 1, 2});
  }
  push(o.name, patches.contiguous(), o.origin);
  for (std::int64_t k = 0; k < g.prefix && (k == 0 || keep_prefix_); ++k) {
    LevelOrigin origin = o.origin;
    origin.source = k == 0 ? LevelSource::kClassToken : LevelSource::kPrefixToken;
    origin.token = k;
    origin.time_steps = temporal ? steps : 0;
    push(k == 0 ? class_token_level(o.name) : prefix_token_level(o.name, k), t.select(axis, k).contiguous(), origin);
  }
}

StoredLevels LevelLayout::apply(const EncoderOutput& out) const {
  StoredLevels stored;
  for (std::size_t i = 0; i < outputs_.size(); ++i) apply_one(outputs_[i], i, out.levels.at(i), stored);
  return stored;
}

std::vector<std::size_t> LevelLayout::select(const std::vector<std::string>& request) const {
  std::vector<std::size_t> selected;
  if (request.empty()) {
    for (std::size_t i = 0; i < names_.size(); ++i) selected.push_back(i);
    return selected;
  }
  std::string available;
  for (const auto& n : names_) available += (available.empty() ? "" : ",") + n;
  for (const auto& want : request) {
    auto it = std::find(names_.begin(), names_.end(), want);
    std::size_t index = std::size_t(it - names_.begin());
    if (it == names_.end()) {
      char* end = nullptr;
      const long v = std::strtol(want.c_str(), &end, 10);
      if (want.empty() || *end != '\0' || v < 0 || std::size_t(v) >= outputs_.size()) {
        throw UsageError(OptionName{"levels"}, "the encoder has no level \"" + want + "\"; it returns " +
                         std::to_string(names_.size()) + " levels: " + available);
      }
      index = main_level_[std::size_t(v)];
    }
    if (std::find(selected.begin(), selected.end(), index) != selected.end()) {
      throw UsageError(OptionName{"levels"}, "level \"" + want + "\" is listed twice");
    }
    selected.push_back(index);
  }
  return selected;
}

}  // namespace embcache
