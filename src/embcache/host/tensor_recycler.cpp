#include "embcache/host/tensor_recycler.hpp"

#include <ATen/ATen.h>

namespace embcache {
namespace {

// No tensor or view but `t` itself refers to its memory.
bool unshared(const at::Tensor& t) { return t.use_count() == 1 && t.storage().use_count() == 1; }

}  // namespace

at::Tensor TensorRecycler::take(at::IntArrayRef shape, at::ScalarType type) {
  for (const at::Tensor& t : kept_) {
    if (t.scalar_type() == type && t.sizes() == shape && unshared(t)) return t;
  }
  at::Tensor fresh = at::empty(shape, at::TensorOptions().dtype(type));
  if (kept_.size() < keep_) kept_.push_back(fresh);
  return fresh;
}

}  // namespace embcache
