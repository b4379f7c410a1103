#include "doctest_torch.hpp"

#include <thread>

#include "embcache/host/tensor_recycler.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("host");

TEST_CASE("a recycled tensor comes back only once nothing else refers to its memory") {
  TensorRecycler recycler(2);
  at::Tensor first = recycler.take({4, 3}, at::kFloat);
  const void* first_memory = first.data_ptr();
  at::Tensor second = recycler.take({4, 3}, at::kFloat);  // the first is in use
  CHECK(second.data_ptr() != first_memory);
  at::Tensor row = first[1];  // a view keeps the memory in use, as a queued crop's slot does
  first = at::Tensor();
  at::Tensor third = recycler.take({4, 3}, at::kFloat);
  CHECK(third.data_ptr() != first_memory);
  CHECK(third.data_ptr() != second.data_ptr());
  row = at::Tensor();
  // Two are kept: the first is free again; the third was not kept.
  third = at::Tensor();
  at::Tensor again = recycler.take({4, 3}, at::kFloat);
  CHECK(again.data_ptr() == first_memory);
  CHECK((again.sizes() == at::IntArrayRef({4, 3})));
  CHECK((again.scalar_type() == at::kFloat));
  CHECK(again.is_contiguous());
  // Another shape or type is not a kept tensor, though the second is free.
  const void* second_memory = second.data_ptr();
  second = at::Tensor();
  const at::Tensor other_shape = recycler.take({3, 4}, at::kFloat);
  CHECK(other_shape.data_ptr() != second_memory);
  CHECK(other_shape.data_ptr() != first_memory);
  at::Tensor other_type = recycler.take({4, 3}, at::kHalf);
  CHECK(other_type.data_ptr() != second_memory);
  CHECK((other_type.scalar_type() == at::kHalf));
  // After clear(), it starts afresh and keeps what it hands out next.
  again = at::Tensor();
  recycler.clear();
  at::Tensor after_clear = recycler.take({4, 3}, at::kFloat);
  CHECK((after_clear.sizes() == at::IntArrayRef({4, 3})));
  second = recycler.take({4, 3}, at::kFloat);
  CHECK(second.data_ptr() != after_clear.data_ptr());
}

TEST_SUITE_END();
