#include "embcache/encoder/allocator_scope.hpp"

#include <malloc.h>

namespace embcache {

namespace {
int depth = 0;
}  // namespace

EncoderAllocatorScope::EncoderAllocatorScope() {
  if (depth++ > 0) return;
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // One arena for the threads started from here on (the encoder's stage thread among them).
  // A thread other than the first gets an arena of its own whose heaps are at most 64 MiB
  // (glibc's HEAP_MAX_SIZE): activations above that size cannot be kept there, and CNNs with
  // large maps ran 1.3-1.6x slower in precompute's encoder thread than in the main thread.
  mallopt(M_ARENA_MAX, 1);
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
