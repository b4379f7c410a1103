// HDF5's Fletcher-32 chunk checksum, computed fast, so chunks can be written and verified
// directly (H5Dwrite_chunk / H5Dread_chunk) at memory speed instead of HDF5's byte loop.
#pragma once

#include <cstddef>
#include <cstdint>

namespace embcache {

// Bit-identical to H5_checksum_fletcher32 (16-bit big-endian words, folded every 360 words);
// HDF5 stores it little-endian after the chunk's bytes.
std::uint32_t fletcher32(const void* data, std::size_t size);

// The checksum of `rows` rows of `row_bytes` bytes each (an even number) laid end to end,
// from each row's own fletcher32, without reading the rows again. Fletcher sums compose: over
// A then B, sum1 = sum1(A) + sum1(B) and sum2 = sum2(A) + words(B) * sum1(A) + sum2(B), modulo
// 65535, and HDF5's folding leaves 0 only for all-zero data (any other multiple of 65535 reads
// 65535), which the rows' own sums tell. Lets the checksums of a chunk's rows be computed on
// another thread, before anyone knows where chunk boundaries fall.
std::uint32_t fletcher32_of_rows(const std::uint32_t* row_sums, std::size_t rows, std::size_t row_bytes);

// A stored chunk as HDF5 writes it: `data_bytes` of data, then their checksum (4 bytes,
// little-endian). True when the checksum matches.
bool stored_checksum_matches(const std::uint8_t* chunk, std::size_t data_bytes);

}  // namespace embcache
