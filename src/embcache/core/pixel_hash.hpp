// A fast 64-bit content hash of crop pixels, stored per cache row to detect stale features.
#pragma once

#include <cstddef>
#include <cstdint>

namespace embcache {

// Not cryptographic: it only has to change when pixels change. Stable across runs and machines
// (little-endian word reads, fixed seed), so stored values stay comparable.
std::uint64_t pixel_hash(const void* data, std::size_t size);

}  // namespace embcache
