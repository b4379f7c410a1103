// NaN/Inf detection on features in their storage dtype, at memory speed: the precompute pipeline
// checks every stored value before it is written, row by row while the row is in cache.
#pragma once

#include <cstddef>
#include <cstdint>

#include "embcache/store/storage_options.hpp"

namespace embcache {

// True when none of the `count` values at `data` (storage dtype `dtype`) is NaN or +/-Inf.
// Reads the exponent bits only, so it never traps and is exact for every dtype.
bool all_finite(const void* data, std::size_t count, StorageDtype dtype);

}  // namespace embcache
