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
}

EncoderAllocatorScope::~EncoderAllocatorScope() {
  if (--depth > 0) return;
  // glibc's documented defaults (mallopt(3)); setting them also keeps the thresholds fixed
  // instead of glibc's dynamic adjustment, which is what a long-running process wants anyway.
  mallopt(M_MMAP_MAX, 65536);
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  malloc_trim(0);
}

}  // namespace embcache
