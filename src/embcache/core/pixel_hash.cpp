#include "embcache/core/pixel_hash.hpp"

#include <cstring>

namespace embcache {
namespace {

constexpr std::uint64_t kMul1 = 0x9E3779B97F4A7C15ULL;
constexpr std::uint64_t kMul2 = 0xC2B2AE3D27D4EB4FULL;

inline std::uint64_t mix(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

inline std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

}  // namespace

std::uint64_t pixel_hash(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  // Four independent lanes keep the multiply pipeline busy (~several GB/s).
  std::uint64_t lanes[4] = {kMul1, kMul2, kMul1 ^ kMul2, ~kMul1};
  std::size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int lane = 0; lane < 4; ++lane) {
      std::uint64_t word;
      std::memcpy(&word, bytes + i + 8 * lane, 8);
      lanes[lane] = rotl(lanes[lane] ^ (word * kMul2), 31) * kMul1;
    }
  }
  std::uint64_t h = mix(lanes[0]) ^ rotl(mix(lanes[1]), 17) ^ rotl(mix(lanes[2]), 31) ^
                    rotl(mix(lanes[3]), 47);
  for (; i < size; ++i) h = (h ^ bytes[i]) * kMul1;
  return mix(h ^ std::uint64_t(size));
}

}  // namespace embcache
