#include "embcache/core/level_origin.hpp"

#include "embcache/core/error.hpp"

namespace embcache {

const EnumTable<LevelSource>& level_sources() {
  static const EnumTable<LevelSource> table{{LevelSource::kMap, "map"},
                                            {LevelSource::kVector, "vector"},
                                            {LevelSource::kPatchTokens, "patch_tokens"},
                                            {LevelSource::kClassToken, "class_token"},
                                            {LevelSource::kPrefixToken, "prefix_token"},
                                            {LevelSource::kChannelsLast, "channels_last"}};
  return table;
}

const char* level_source_name(LevelSource source) { return level_sources().name(source); }

LevelSource default_level_source(std::size_t row_rank, std::int64_t time_steps) {
  return row_rank == (time_steps > 0 ? 2u : 1u) ? LevelSource::kVector : LevelSource::kMap;
}

LevelSource parse_level_source(const std::string& text) {
  if (const auto source = level_sources().find(text)) return *source;
  throw InputError("unknown level source \"" + text + "\" (written by a newer embcache?)");
}

}  // namespace embcache
