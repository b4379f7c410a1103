// The identity of one cache row: (group, window, crop bounds).
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace embcache {

// Pixel bounds (x1, y1, x2, y2), end-exclusive, in window (or absolute) pixel coordinates.
struct Bounds {
  std::int64_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  std::int64_t width() const { return x2 - x1; }
  std::int64_t height() const { return y2 - y1; }
  std::array<std::int64_t, 4> as_array() const { return {x1, y1, x2, y2}; }
  bool operator==(const Bounds& o) const {
    return x1 == o.x1 && y1 == o.y1 && x2 == o.x2 && y2 == o.y2;
  }
};

std::ostream& operator<<(std::ostream& out, const Bounds& b);

struct CropKey {
  std::string group;
  std::string window;
  Bounds bounds;

  // A compact unique string for hash maps; groups and names may hold any UTF-8 but not NUL.
  std::string map_key() const;
  // For messages: group/window[x1,y1,x2,y2].
  std::string describe() const;
};

// FNV-1a of a window's key (group, window): the same window always hashes alike, in every run
// and on every machine. --val-fraction carves and --shard splits by it, so all crops of a window
// stay together.
std::uint64_t window_key_hash(const std::string& group, const std::string& window);
// A crop's key (group, window, bounds x1 y1 x2 y2) as 64 bits: the window hash, then each bound mixed in.
std::uint64_t crop_key_hash(const std::string& group, const std::string& window, const std::int64_t* bounds);

}  // namespace embcache
