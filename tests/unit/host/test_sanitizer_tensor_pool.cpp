#include "doctest_torch.hpp"

#include <c10/core/CPUAllocator.h>

#include <vector>

#include "embcache/host/sanitizer_tensor_pool.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

using namespace embcache;

TEST_SUITE_BEGIN("host");

#if defined(__SANITIZE_ADDRESS__)

// main() installed the pool (tune_process). 5 MB: an 8 MiB block, past ASan's own size classes.
TEST_CASE("under AddressSanitizer, a large tensor's block is poisoned past its size and once freed, and handed out again") {
  REQUIRE(c10::GetCPUAllocator() != c10::GetDefaultCPUAllocator());
  constexpr int64_t kBytes = 5'000'000;
  at::Tensor tensor = at::empty({kBytes}, at::kByte);
  char* data = static_cast<char*>(tensor.data_ptr());
  CHECK_FALSE(__asan_address_is_poisoned(data));
  CHECK_FALSE(__asan_address_is_poisoned(data + kBytes - 1));
  CHECK(__asan_address_is_poisoned(data + kBytes));  // an overflow is still reported
  CHECK(__asan_address_is_poisoned(data - 1));       // and an underflow
  tensor = at::Tensor();
  CHECK(__asan_address_is_poisoned(data));  // a use after free is still reported

  // Blocks of one size go out again oldest first: the freed one comes back within the blocks
  // kept (at most 512 MiB of them).
  std::vector<at::Tensor> taken;
  bool again = false;
  while (!again && taken.size() <= 64) {
    taken.push_back(at::empty({kBytes}, at::kByte));
    again = taken.back().data_ptr() == data;
  }
  CHECK(again);
  CHECK_FALSE(__asan_address_is_poisoned(data + kBytes - 1));
  CHECK(__asan_address_is_poisoned(data + kBytes));
}

TEST_CASE("under AddressSanitizer, small and empty tensors and the raw interface work through the pool") {
  at::Tensor small = at::ones({100}, at::kFloat);
  CHECK(small.sum().item<float>() == 100.0f);
  CHECK(__asan_address_is_poisoned(static_cast<char*>(small.data_ptr()) + 400));
  at::Tensor empty = at::empty({0}, at::kFloat);
  CHECK(empty.numel() == 0);
  c10::Allocator* allocator = c10::GetCPUAllocator();
  void* raw = allocator->raw_allocate(1 << 20);
  CHECK_FALSE(__asan_address_is_poisoned(raw));
  allocator->raw_deallocate(raw);
  allocator->raw_deallocate(nullptr);  // what oneDNN's convolution does with a buffer of no bytes
}

#else

TEST_CASE("outside AddressSanitizer, LibTorch keeps its own CPU allocator") {
  CHECK_FALSE(install_sanitizer_tensor_pool());
  CHECK(c10::GetCPUAllocator() == c10::GetDefaultCPUAllocator());
}

#endif

TEST_SUITE_END();
