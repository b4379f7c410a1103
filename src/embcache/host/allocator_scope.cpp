#include "embcache/host/allocator_scope.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "embcache/host/memory_info.hpp"

namespace embcache {

namespace {
int depth = 0;

// Address space, not memory: only the pages a run touches are ever backed. The same for every
// encoder: a reservation sized from the encoder's file did not make large encoders (ViT-L/16)
// faster. A reservation of 2 GiB or more would also need M_TRIM_THRESHOLD at -1, below.
constexpr std::int64_t kHugePageReserveBytes = std::int64_t(1) << 30;

std::string first_line_of_file(const char* path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// Huge pages where the kernel gives them on request, and a reservation only where address space
// costs nothing: under strict overcommit (mode 2) it would count against the commit limit.
bool reserve_huge_pages_here() {
  const std::string modes = first_line_of_file("/sys/kernel/mm/transparent_hugepage/enabled");
  const bool on_request = modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
  return on_request && first_line_of_file("/proc/sys/vm/overcommit_memory") != "2";
}

std::uintptr_t page_aligned(std::uintptr_t at, bool up) {
  const auto page = std::uintptr_t(sysconf(_SC_PAGESIZE));
  if (up) at += page - 1;
  return at - at % page;
}

// Grows the heap's free top by up to 1 GiB (a quarter of the available memory at most) and asks
// the kernel to back it with transparent huge pages. A CNN's activations and the stages' buffers
// then fault in 2 MiB at a time instead of 4 KiB: a run faults in its whole heap once, while
// loading and in its first call, and a fault per 4 KiB page is slow on VMs
// (docs/performance.md, "Memory the encoder can reuse").
// Where the reservation does not come from the heap's top (another allocator, as under a
// sanitizer; brk refused), nothing is advised. A run that outgrows the reservation gets small
// pages beyond it, as before.
void reserve_heap_on_huge_pages() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return;  // malloc is the sanitizer's: there is no glibc heap to reserve
#endif
  if (!reserve_huge_pages_here()) return;
  const std::int64_t bytes = std::min(kHugePageReserveBytes, available_host_bytes() / 4);
  if (bytes <= 0) return;
  void* block = std::malloc(std::size_t(bytes));
  if (block == nullptr) return;
  const auto start = reinterpret_cast<std::uintptr_t>(block);
  std::free(block);  // back into the top chunk, which M_TRIM_THRESHOLD keeps
  const auto top_end = reinterpret_cast<std::uintptr_t>(sbrk(0));
  if (start >= top_end || top_end - start < std::uintptr_t(bytes)) return;
  const std::uintptr_t from = page_aligned(start, true), to = page_aligned(top_end, false);
  // Refused (a kernel without THP support), the heap keeps small pages: nothing worse than before.
  if (from < to) (void)madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
}

}  // namespace

EncoderAllocatorScope::EncoderAllocatorScope() {
  if (depth++ > 0) return;
  mallopt(M_MMAP_MAX, 0);
  // Above the reservation's size, so that freeing it keeps it. INT_MAX is 2 GiB: a free top
  // larger than that is trimmed at once (-1 disables trimming, mallopt(3)).
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  // One arena for the threads started from here on (the encoder's stage thread among them).
  // A thread other than the first gets an arena of its own whose heaps are at most 64 MiB
  // (glibc's HEAP_MAX_SIZE): activations above that size cannot be kept there, and CNNs with
  // large maps would run slower in precompute's encoder thread than in the main thread.
  mallopt(M_ARENA_MAX, 1);
  reserve_heap_on_huge_pages();
}

EncoderAllocatorScope::~EncoderAllocatorScope() {
  if (--depth > 0) return;
  // glibc's documented defaults (mallopt(3)); setting them also keeps the thresholds fixed
  // instead of glibc's dynamic adjustment, which is what a long-running process wants anyway.
  mallopt(M_MMAP_MAX, 65536);
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  mallopt(M_ARENA_MAX, 0);  // 0: glibc's default (8 arenas per core)
  malloc_trim(0);
}

}  // namespace embcache
