// Buffers filled again and again (a block of rows read from a file, a batch of normalised crops)
// go back into memory that was filled before, when nobody holds it any more.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace embcache {

// Why: on some VMs the first write into a page costs far more than later ones, by the process
// and again by the kernel when a read() first copies into it (docs/performance.md, "Memory the
// encoder can reuse"). glibc's malloc may hand a freed block to any thread's next request, so
// freeing and allocating the same size does not give the same memory back.
//
// Keeps up to `keep` tensors it handed out. Not thread-safe: one owner takes from it; the tensors
// (and views of them) may live on in other threads, and a tensor is handed out again only once
// no other tensor or view refers to its storage.
class TensorRecycler {
 public:
  explicit TensorRecycler(std::size_t keep) : keep_(keep) {}

  // An uninitialised contiguous tensor of this shape and type on the CPU: a kept one that no one
  // else refers to, else a new one (kept while fewer than `keep` are).
  at::Tensor take(at::IntArrayRef shape, at::ScalarType type);
  // Lets every kept tensor go (those still in use live on with their users).
  void clear() { kept_.clear(); }

 private:
  std::size_t keep_;
  std::vector<at::Tensor> kept_;
};

}  // namespace embcache
