// HDF5's Fletcher-32 chunk checksum, computed fast, so chunks can be written and verified
// directly (H5Dwrite_chunk / H5Dread_chunk) at memory speed instead of HDF5's byte loop.
#pragma once

#include <cstddef>
#include <cstdint>

namespace embcache {

// Bit-identical to H5_checksum_fletcher32 (16-bit big-endian words, folded every 360 words);
// HDF5 stores it little-endian after the chunk's bytes.
std::uint32_t fletcher32(const void* data, std::size_t size);

// A stored chunk as HDF5 writes it: `data_bytes` of data, then their checksum (4 bytes,
// little-endian). True when the checksum matches.
bool stored_checksum_matches(const std::uint8_t* chunk, std::size_t data_bytes);

}  // namespace embcache
