#include "embcache/store/fletcher32.hpp"

namespace embcache {

// Built for AVX2 too and picked at load time: the checksum of every chunk written and read.
__attribute__((target_clones("avx2", "default")))
std::uint32_t fletcher32(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  std::size_t words = size / 2;
  std::uint32_t sum1 = 0, sum2 = 0;
  // Per block of n <= 360 words w_0..w_{n-1}: sum1 += S, sum2 += n * sum1_before + sum_i (n - i) w_i.
  // The same integers HDF5's sequential loop reaches (it never overflows 32 bits), so folding at
  // the same block boundaries gives the same result, including the 0 / 65535 representation.
  while (words > 0) {
    const std::uint32_t n = words > 360 ? 360 : std::uint32_t(words);
    words -= n;
    std::uint32_t s = 0, t = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t w = (std::uint32_t(bytes[2 * i]) << 8) | bytes[2 * i + 1];
      s += w;
      t += (n - i) * w;
    }
    bytes += 2 * n;
    sum2 += n * sum1 + t;
    sum1 += s;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (size % 2) {
    sum1 += std::uint32_t(*bytes) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

bool stored_checksum_matches(const std::uint8_t* chunk, std::size_t data_bytes) {
  const std::uint8_t* sum = chunk + data_bytes;
  const std::uint32_t stored = std::uint32_t(sum[0]) | (std::uint32_t(sum[1]) << 8) | (std::uint32_t(sum[2]) << 16) |
                               (std::uint32_t(sum[3]) << 24);
  return fletcher32(chunk, data_bytes) == stored;
}

}  // namespace embcache
