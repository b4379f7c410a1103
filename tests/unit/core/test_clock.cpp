#include "doctest_torch.hpp"

#include <chrono>
#include <thread>

#include "embcache/core/clock.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("core");

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
