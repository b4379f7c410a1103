#include "doctest_torch.hpp"

#include <thread>

#include "embcache/core/clock.hpp"
#include "embcache/host/tensor_recycler.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("core");

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

TEST_CASE("the CPU ledger charges each kind of work the CPU its thread used for it") {
  const auto spin = [](double seconds) {
    const double until = thread_cpu_seconds() + seconds;
    volatile double x = 0;
    while (thread_cpu_seconds() < until) x = x + 1;
  };
  StageTime read, write;
  const double before = thread_cpu_seconds();
  {
    CpuLedger cpu(read);
    spin(0.02);
    cpu.charge_to(write);
    spin(0.03);
    cpu.charge_to(read);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // waiting uses no CPU
    spin(0.01);
  }
  const double used = thread_cpu_seconds() - before;
  CHECK(read.cpu >= 0.03);
  CHECK(read.cpu < 0.03 + 0.02);
  CHECK(write.cpu >= 0.03);
  CHECK(write.cpu < 0.03 + 0.02);
  CHECK(read.cpu + write.cpu <= used);
  CHECK(read.wall == 0);  // wall time is the stopwatches'
}

TEST_SUITE_END();
