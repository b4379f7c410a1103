#include "embcache/store/fletcher32.hpp"

#include "embcache/host/target_clones.hpp"

namespace embcache {

// Built for AVX2 too and picked at load time: the checksum of every chunk written and read.
EMBCACHE_TARGET_CLONES("arch=x86-64-v4", "avx2", "default")
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

std::uint32_t fletcher32_of_rows(const std::uint32_t* row_sums, std::size_t rows, std::size_t row_bytes) {
  constexpr std::uint64_t kMod = 65535;
  const std::uint64_t words = row_bytes / 2;
  std::uint64_t sum1 = 0, sum2 = 0;
  bool nonzero = false;  // a row's sum1 is 0 only when all its words are
  for (std::size_t r = 0; r < rows; ++r) {
    const std::uint64_t s1 = (row_sums[r] & 0xffff) % kMod, s2 = (row_sums[r] >> 16) % kMod;
    nonzero = nonzero || (row_sums[r] & 0xffff) != 0;
    sum2 = (sum2 + words % kMod * sum1 + s2) % kMod;
    sum1 = (sum1 + s1) % kMod;
  }
  if (!nonzero) return 0;
  // HDF5's representation of a nonzero sum: 1..65535 (a multiple of 65535 reads 65535).
  const auto fold = [](std::uint64_t s) { return std::uint32_t(s == 0 ? kMod : s); };
  return (fold(sum2) << 16) | fold(sum1);
}

bool stored_checksum_matches(const std::uint8_t* chunk, std::size_t data_bytes) {
  const std::uint8_t* sum = chunk + data_bytes;
  const std::uint32_t stored = std::uint32_t(sum[0]) | (std::uint32_t(sum[1]) << 8) | (std::uint32_t(sum[2]) << 16) |
                               (std::uint32_t(sum[3]) << 24);
  return fletcher32(chunk, data_bytes) == stored;
}

}  // namespace embcache
