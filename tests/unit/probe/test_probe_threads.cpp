// train-probe's intra-op threads: its default stops at the CPUs this process may run on, where
// LibTorch's own default counts the cores of the whole machine.
#include "doctest_torch.hpp"

#include <ATen/Parallel.h>

#include "embcache/host/cpu_info.hpp"
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
  struct Restore {
    int threads = at::get_num_threads();
    ~Restore() { at::set_num_threads(threads); }
  } restore;  // LibTorch's count is the process's: later tests get theirs back
  // As in a Slurm task given one CPU of a larger machine, with LibTorch's default at 3 threads:
  // what it picks on a machine of 3 cores whatever the affinity (it counts cores through cpuinfo,
  // not sched_getaffinity).
  int cpus_seen = -1, threads_default = -1, threads_given = -1;
  testing::on_one_cpu([&] {
    at::set_num_threads(3);
    cpus_seen = usable_cpus();
    threads_default = train_probe(plan_probe(o)).metrics["timing"]["threads"].get<int>();
    threads_given = train_probe(plan_probe(given)).metrics["timing"]["threads"].get<int>();
  });
  CHECK(cpus_seen == 1);
  CHECK(threads_default == 1);
  CHECK(threads_given == 2);  // --threads given is obeyed whatever the affinity
}
