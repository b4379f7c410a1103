// glibc malloc settings for an encoder run or a probe pass on the CPU, for as long as it runs.
#pragma once

namespace embcache {

// By default glibc mmaps every block above a threshold and unmaps it on free, so a CNN's large
// activations are page-faulted and zeroed again on every forward, and a probe's batches on every
// pass (docs/performance.md, "Memory the encoder can reuse"). While a scope lives, large blocks
// come from the heap and freed memory is kept for the next forward. When the last scope ends,
// glibc's defaults are back and the kept memory is returned to the system, so later work in the
// same process (a probe's bounded stream buffer in `embcache run`) is not charged for the
// encoder's peak. Where the kernel gives transparent huge pages on request, the
// outermost scope also reserves up to 1 GiB of address space at the heap's top for them, so the
// heap faults in 2 MiB at a time (allocator_scope.cpp). Scopes nest; not for concurrent use from
// several threads.
class EncoderAllocatorScope {
 public:
  EncoderAllocatorScope();
  ~EncoderAllocatorScope();
  EncoderAllocatorScope(const EncoderAllocatorScope&) = delete;
  EncoderAllocatorScope& operator=(const EncoderAllocatorScope&) = delete;
};

}  // namespace embcache
