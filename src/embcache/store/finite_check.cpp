#include "embcache/store/finite_check.hpp"

#include "embcache/host/target_clones.hpp"

namespace embcache {

namespace {

// A value is NaN or Inf exactly when all its exponent bits are set. The loop keeps an OR of
// those tests and returns once at the end, so the compiler vectorises it.
template <typename Bits, Bits kExponent>
EMBCACHE_TARGET_CLONES("arch=skylake-avx512", "avx2", "default") bool exponents_not_all_set(const Bits* v,
                                                                                        std::size_t n) {
  Bits bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad |= Bits((v[i] & kExponent) == kExponent);
  return bad == 0;
}

}  // namespace

bool all_finite(const void* data, std::size_t count, StorageDtype dtype) {
  switch (dtype) {
    case StorageDtype::kFloat32:
      return exponents_not_all_set<std::uint32_t, 0x7f800000u>(static_cast<const std::uint32_t*>(data), count);
    case StorageDtype::kFloat16:
      return exponents_not_all_set<std::uint16_t, 0x7c00u>(static_cast<const std::uint16_t*>(data), count);
    case StorageDtype::kBFloat16:
      return exponents_not_all_set<std::uint16_t, 0x7f80u>(static_cast<const std::uint16_t*>(data), count);
    case StorageDtype::kInt8:
      return true;  // integers; the float features were checked before quantisation
  }
  return true;
}

}  // namespace embcache
