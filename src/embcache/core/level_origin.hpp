// What a stored level came from: a map or vector as returned, a token sequence's patches or
// prefix tokens, a channels-last map; and its time axis. Stored as level attributes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "embcache/core/enum_table.hpp"

namespace embcache {

// What a stored level came from (the level attributes `source`, `source_output`, ...).
enum class LevelSource { kMap, kVector, kPatchTokens, kClassToken, kPrefixToken, kChannelsLast };
const EnumTable<LevelSource>& level_sources();
const char* level_source_name(LevelSource source);  // level_sources()'s name
// What a level without a `source` (format 1 files, older commit records) is: a vector when its
// row has one axis (two with a time axis), else a map.
LevelSource default_level_source(std::size_t row_rank, std::int64_t time_steps);
LevelSource parse_level_source(const std::string& text);  // InputError on unknown names

struct LevelOrigin {
  LevelSource source = LevelSource::kMap;
  std::string output;              // the encoder output it was cut from (its name)
  std::int64_t patch_size = 0;     // token levels: input pixels per patch side
  std::int64_t prefix_tokens = 0;  // token levels: tokens before the patches (class, registers)
  std::int64_t token = -1;         // class/prefix token levels: the token's position
  std::int64_t time_steps = 0;     // > 0: rows hold a time axis first, [T, C, H, W] or [T, C]
  // Whether a reader of format 1 would misread the level or miss what it is (docs/cache-format.md).
  bool needs_format_2() const {
    return time_steps > 0 || (source != LevelSource::kMap && source != LevelSource::kVector);
  }
};

}  // namespace embcache
