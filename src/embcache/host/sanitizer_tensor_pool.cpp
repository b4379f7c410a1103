#include "embcache/host/sanitizer_tensor_pool.hpp"

#if defined(__SANITIZE_ADDRESS__)

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <sanitizer/asan_interface.h>
#include <torch/version.h>

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>

namespace embcache {
namespace {

// Why: AddressSanitizer gives every allocation above 128 KiB a mapping of its own and unmaps it
// when it leaves quarantine, so each large tensor LibTorch allocates faults its pages in afresh.
// A normal build's glibc hands the same blocks out again. Training a dense head under ASan then
// spends most of its time in the kernel, faulting pages in, and the sanitizer leg of CI would
// take several times as long.
//
// What the pool keeps of ASan's checks on our code:
//   - the bytes of a block past the size asked for stay poisoned, so an overflow is reported,
//     and the header before the data is poisoned, so an underflow is too;
//   - a block given back is poisoned whole until it is handed out again (oldest of its size
//     first), so a use after free is reported until then;
//   - the pool refers only to free blocks: a block in use is reachable only from its tensor, so
//     LeakSanitizer still reports a leaked one.
// Small tensors (under 128 KiB) keep ASan's own allocator and quarantine; the header only tells
// them apart.
constexpr std::size_t kAlignment = 64;                      // c10's alignment of CPU tensors
constexpr std::size_t kHeader = kAlignment;                 // holds the block's size (0: not pooled)
constexpr std::size_t kSmallest = std::size_t{128} << 10;   // ASan's own allocator reuses smaller
constexpr std::size_t kKeptBytes = std::size_t{512} << 20;  // free blocks kept at most

std::size_t& header_of(char* block) { return *reinterpret_cast<std::size_t*>(block); }

// A power of two, so that a block also fits the next request of about its size.
std::size_t pooled_bytes(std::size_t n) {
  std::size_t bytes = kSmallest;
  while (bytes < n + kHeader) bytes <<= 1;
  return bytes;
}

char* allocate_block(std::size_t bytes, std::size_t header) {
  void* block = nullptr;
  TORCH_CHECK(posix_memalign(&block, kAlignment, bytes) == 0, "sanitizer tensor pool: not enough memory: you tried to allocate ",
              bytes, " bytes");
  header_of(static_cast<char*>(block)) = header;
  return static_cast<char*>(block);
}

class Pool {
 public:
  void* take(std::size_t n) {
    if (n + kHeader < kSmallest) {
      char* block = allocate_block(n + kHeader, 0);
      ASAN_POISON_MEMORY_REGION(block, kHeader);
      return block + kHeader;
    }
    const std::size_t bytes = pooled_bytes(n);
    char* block = take_kept(bytes);
    if (block == nullptr) {
      block = allocate_block(bytes, bytes);
      ASAN_POISON_MEMORY_REGION(block, bytes);
    }
    ASAN_UNPOISON_MEMORY_REGION(block + kHeader, n);
    return block + kHeader;
  }

  void give_back(void* data) {
    if (data == nullptr) return;  // a tensor of no bytes, given back through the raw interface
    char* block = static_cast<char*>(data) - kHeader;
    ASAN_UNPOISON_MEMORY_REGION(block, sizeof(std::size_t));
    const std::size_t bytes = header_of(block);
    if (bytes == 0) {
      ASAN_UNPOISON_MEMORY_REGION(block, kHeader);
      std::free(block);
      return;
    }
    ASAN_POISON_MEMORY_REGION(block, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    kept_[bytes].push_back(block);
    kept_bytes_ += bytes;
    while (kept_bytes_ > kKeptBytes) release_largest_oldest();
  }

 private:
  char* take_kept(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto kept = kept_.find(bytes);
    return kept == kept_.end() ? nullptr : pop_oldest(kept);
  }

  // Requires mutex_ held and a block kept.
  void release_largest_oldest() {
    const auto largest = std::prev(kept_.end());
    const std::size_t bytes = largest->first;
    char* block = pop_oldest(largest);
    ASAN_UNPOISON_MEMORY_REGION(block, bytes);
    std::free(block);
  }

  // The oldest block of one size, no longer kept. Requires mutex_ held.
  char* pop_oldest(std::map<std::size_t, std::deque<char*>>::iterator kept) {
    const std::size_t bytes = kept->first;
    char* block = kept->second.front();
    kept->second.pop_front();
    if (kept->second.empty()) kept_.erase(kept);
    kept_bytes_ -= bytes;
    return block;
  }

  std::mutex mutex_;
  std::map<std::size_t, std::deque<char*>> kept_;  // by block size, oldest first; never empty deques
  std::size_t kept_bytes_ = 0;
};

// Never destroyed: tensors in static objects may be freed after main returns.
Pool& pool() {
  static Pool* const instance = new Pool;
  return *instance;
}

void give_back(void* data) { pool().give_back(data); }

class PoolAllocator final : public c10::Allocator {
 public:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(std::size_t n) override { return take(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(std::size_t n) const override { return take(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &give_back; }

 private:
  static c10::DataPtr take(std::size_t n) {
    void* data = n == 0 ? nullptr : pool().take(n);
    return {data, data, &give_back, c10::Device(c10::DeviceType::CPU)};
  }
};

}  // namespace

bool install_sanitizer_tensor_pool() {
  static PoolAllocator* const allocator = new PoolAllocator;  // c10 keeps it to the end
  c10::SetCPUAllocator(allocator, /*priority=*/1);            // above the default's 0
  return true;
}

}  // namespace embcache

#else

namespace embcache {

bool install_sanitizer_tensor_pool() { return false; }

}  // namespace embcache

#endif
