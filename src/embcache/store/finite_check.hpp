// NaN/Inf detection on features in their storage dtype, at memory speed: the precompute pipeline
// checks every stored value before it is written, chunk by chunk while the chunk is in cache.
#pragma once

#include <cstddef>
#include <cstdint>

#include "embcache/store/storage_options.hpp"

namespace embcache {

// True when none of the `count` values at `data` (storage dtype `dtype`) is NaN or +/-Inf.
// Reads the exponent bits only, so it never traps and is exact for every dtype.
bool all_finite(const void* data, std::size_t count, StorageDtype dtype);

// The first of `rows` rows of `row_values` values each that holds a NaN/Inf, or -1.
std::int64_t first_nonfinite_row(const void* data, std::int64_t rows, std::size_t row_values, StorageDtype dtype);

}  // namespace embcache
