// Benchmark of the per-row work the convert stage does off the I/O thread: fletcher32 and the
// NaN/Inf scan, against reading the same bytes (a plain 64-bit sum) as the yardstick of memory
// speed. Prints one JSON object (GiB/s, best of 5 passes over 256 MiB). Not a test: it asserts nothing.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "embcache/store/finite_check.hpp"
#include "embcache/store/fletcher32.hpp"

namespace {

double gib_per_second(const std::vector<std::uint8_t>& bytes, const std::function<std::uint64_t()>& pass) {
  double best = 1e30;
  volatile std::uint64_t sink = 0;
  for (int repeat = 0; repeat < 5; ++repeat) {
    const auto t0 = std::chrono::steady_clock::now();
    sink = sink + pass();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return double(bytes.size()) / double(1 << 30) / best;
}

}  // namespace

int main() {
  std::vector<std::uint8_t> bytes(std::size_t(256) << 20);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::uint8_t((i * 131 + 7) ^ (i >> 9));
  // Finite float32 values: the scan reads everything.
  for (std::size_t i = 3; i < bytes.size(); i += 4) bytes[i] &= 0x3f;
  const double read = gib_per_second(bytes, [&] {
    std::uint64_t sum = 0;
    const std::size_t words = bytes.size() / 8;
    for (std::size_t i = 0; i < words; ++i) {
      std::uint64_t w;
      std::memcpy(&w, bytes.data() + 8 * i, 8);
      sum += w;
    }
    return sum;
  });
  const double fletcher = gib_per_second(bytes, [&] { return std::uint64_t(embcache::fletcher32(bytes.data(), bytes.size())); });
  const double finite = gib_per_second(bytes, [&] {
    return std::uint64_t(embcache::all_finite(bytes.data(), bytes.size() / 4, embcache::StorageDtype::kFloat32));
  });
  std::printf("{\"read_gib_per_second\": %.2f, \"fletcher32_gib_per_second\": %.2f, \"fletcher32_over_read\": %.3f, "
              "\"finite_scan_float32_gib_per_second\": %.2f, \"finite_scan_over_read\": %.3f}\n",
              read, fletcher, fletcher / read, finite, finite / read);
  return 0;
}
