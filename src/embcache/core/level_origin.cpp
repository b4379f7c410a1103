#include "embcache/core/level_origin.hpp"

#include "embcache/core/error.hpp"

namespace embcache {

const char* level_source_name(LevelSource source) {
  switch (source) {
    case LevelSource::kMap: return "map";
    case LevelSource::kVector: return "vector";
    case LevelSource::kPatchTokens: return "patch_tokens";
    case LevelSource::kClassToken: return "class_token";
    case LevelSource::kPrefixToken: return "prefix_token";
    case LevelSource::kChannelsLast: return "channels_last";
  }
  return "?";
}

LevelSource default_level_source(std::size_t row_rank, std::int64_t time_steps) {
  return row_rank == (time_steps > 0 ? 2u : 1u) ? LevelSource::kVector : LevelSource::kMap;
}

LevelSource parse_level_source(const std::string& text) {
  for (LevelSource s : {LevelSource::kMap, LevelSource::kVector, LevelSource::kPatchTokens, LevelSource::kClassToken,
                        LevelSource::kPrefixToken, LevelSource::kChannelsLast}) {
    if (text == level_source_name(s)) return s;
  }
  throw InputError("unknown level source \"" + text + "\" (written by a newer embcache?)");
}

}  // namespace embcache
