// HDF5's Fletcher-32 chunk checksum, computed fast, so chunks can be written and verified
// directly (H5Dwrite_chunk / H5Dread_chunk) at memory speed instead of HDF5's byte loop.
#pragma once

#include <cstddef>
#include <cstdint>

namespace embcache {

// Bit-identical to H5_checksum_fletcher32 (16-bit big-endian words, folded every 360 words);
// HDF5 stores it little-endian after the chunk's bytes.
std::uint32_t fletcher32(const void* data, std::size_t size);

}  // namespace embcache
