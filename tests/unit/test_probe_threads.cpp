// train-probe's intra-op threads: its default stops at the CPUs this process may run on, where
// LibTorch's own default counts the cores of the whole machine.
#include "doctest_torch.hpp"

#include <ATen/Parallel.h>
#include <sched.h>

#include <exception>
#include <thread>

#include "embcache/core/cpu_info.hpp"
#include "embcache/probe/probe_plan.hpp"
#include "embcache/probe/trainer.hpp"
#include "test_support.hpp"

using namespace embcache;

TEST_CASE("train-probe's default threads stop at the CPUs the process may run on, not LibTorch's count of the machine's cores" *
          doctest::test_suite("probe")) {
  testing::TempDir dir;
  ProbeOptions o = testing::small_classification_probe(dir, 24, 4);
  o.levels = "0";
  o.epochs = 1;
  o.device = "cpu";
  o.quiet = true;
  ProbeOptions given = o;
  o.out = dir.file("default");
  given.out = dir.file("given");
  given.threads = 2;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  const int before = at::get_num_threads();
  // As in a Slurm task given one CPU of a larger machine: a thread whose affinity holds one CPU,
  // with LibTorch's default at 3 threads, which is what it picks on a machine of 3 cores whatever
  // the affinity (its default counts cores through cpuinfo, not sched_getaffinity).
  int pinned = -1, cpus_seen = -1, threads_default = -1, threads_given = -1;
  std::exception_ptr failure;
  std::thread task([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    pinned = sched_setaffinity(0, sizeof(one), &one);
    at::set_num_threads(3);
    try {
      cpus_seen = usable_cpus();
      threads_default = train_probe(plan_probe(o)).metrics["timing"]["threads"].get<int>();
      threads_given = train_probe(plan_probe(given)).metrics["timing"]["threads"].get<int>();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  task.join();
  at::set_num_threads(before);
  REQUIRE(pinned == 0);
  if (failure) std::rethrow_exception(failure);
  CHECK(cpus_seen == 1);
  CHECK(threads_default == 1);
  CHECK(threads_given == 2);  // --threads given is obeyed whatever the affinity
}
