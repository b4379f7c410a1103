#include "embcache/core/crop_key.hpp"

#include <ostream>

namespace embcache {

std::ostream& operator<<(std::ostream& out, const Bounds& b) {
  return out << "[" << b.x1 << "," << b.y1 << "," << b.x2 << "," << b.y2 << "]";
}

std::string CropKey::map_key() const {
  std::string key;
  key.reserve(group.size() + window.size() + 2 + 32);
  key += group;
  key += '\0';
  key += window;
  key += '\0';
  for (std::int64_t v : bounds.as_array()) key.append(reinterpret_cast<const char*>(&v), sizeof v);
  return key;
}

std::uint64_t window_key_hash(const std::string& group, const std::string& window) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  mix(group);
  mix(window);
  return h;
}

std::uint64_t crop_key_hash(const std::string& group, const std::string& window, const std::int64_t* bounds) {
  std::uint64_t h = window_key_hash(group, window);
  for (int k = 0; k < 4; ++k) h = (h ^ std::uint64_t(bounds[k])) * 1099511628211ull;
  return h;
}

std::string CropKey::describe() const {
  return group + "/" + window + "[" + std::to_string(bounds.x1) + "," + std::to_string(bounds.y1) +
         "," + std::to_string(bounds.x2) + "," + std::to_string(bounds.y2) + "]";
}

}  // namespace embcache
