#include "doctest_torch.hpp"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "embcache/host/cpu_info.hpp"
#include "test_support.hpp"

using namespace embcache;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("host");

namespace {

void write_file(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text << "\n";
}

}  // namespace

TEST_CASE("a cgroup v2 CPU quota counts in whole CPUs, rounded up, and the lowest on the way to the root holds") {
  testing::TempDir dir;
  const fs::path root = dir.path();
  const std::string self = "0::/jobs/task\n";
  CHECK_FALSE(cgroup_cpu_limit(self, root.string()).has_value());  // nothing there: no quota
  write_file(root / "jobs/task/cpu.max", "max 100000");
  CHECK_FALSE(cgroup_cpu_limit(self, root.string()).has_value());
  write_file(root / "jobs/task/cpu.max", "250000 100000");
  CHECK(cgroup_cpu_limit(self, root.string()) == 3);
  write_file(root / "jobs/task/cpu.max", "200000 100000");
  CHECK(cgroup_cpu_limit(self, root.string()) == 2);
  write_file(root / "jobs/task/cpu.max", "50000 100000");  // half a CPU's time still runs one thread
  CHECK(cgroup_cpu_limit(self, root.string()) == 1);
  write_file(root / "jobs/task/cpu.max", "800000 100000");
  write_file(root / "jobs/cpu.max", "400000 100000");  // the parent's quota binds its children
  CHECK(cgroup_cpu_limit(self, root.string()) == 4);
  write_file(root / "jobs/cpu.max", "not a quota");
  CHECK(cgroup_cpu_limit(self, root.string()) == 8);
}

TEST_CASE("a container's own cgroup namespace shows its group as the root: the quota is read there") {
  testing::TempDir dir;
  const fs::path root = dir.path();
  write_file(root / "cpu.max", "200000 100000");
  CHECK(cgroup_cpu_limit("0::/docker/0123abcd\n", root.string()) == 2);
  CHECK(cgroup_cpu_limit("0::/\n", root.string()) == 2);
}

TEST_CASE("a cgroup v1 CPU quota is read from the cpu controller's hierarchy; -1 is none") {
  testing::TempDir dir;
  const fs::path root = dir.path();
  const std::string self = "5:memory:/user/1\n4:cpu,cpuacct:/slurm/job7\n1:name=systemd:/\n";
  write_file(root / "cpu,cpuacct/slurm/job7/cpu.cfs_period_us", "100000");
  write_file(root / "cpu,cpuacct/slurm/job7/cpu.cfs_quota_us", "-1");
  CHECK_FALSE(cgroup_cpu_limit(self, root.string()).has_value());
  write_file(root / "cpu,cpuacct/slurm/job7/cpu.cfs_quota_us", "300000");
  CHECK(cgroup_cpu_limit(self, root.string()) == 3);
  // A memory limit is not a CPU limit.
  write_file(root / "memory/user/1/cpu.cfs_period_us", "100000");
  write_file(root / "memory/user/1/cpu.cfs_quota_us", "100000");
  CHECK(cgroup_cpu_limit(self, root.string()) == 3);
  // Mounted as "cpu" alone while /proc/self/cgroup names the joined controllers.
  testing::TempDir other;
  write_file(fs::path(other.path()) / "cpu/slurm/job7/cpu.cfs_period_us", "100000");
  write_file(fs::path(other.path()) / "cpu/slurm/job7/cpu.cfs_quota_us", "150000");
  CHECK(cgroup_cpu_limit(self, other.path()) == 2);
  CHECK_FALSE(cgroup_cpu_limit("garbage\n\n", root.string()).has_value());
}

TEST_CASE("the usable CPUs are the affinity's, capped by the cgroup's CPU quota, never raised by it") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  const int affinity = CPU_COUNT(&allowed);
  testing::TempDir dir;
  const fs::path root = dir.path();
  const std::string self = "0::/container\n";
  CHECK(usable_cpus(self, root.string()) == affinity);  // no quota
  write_file(root / "container/cpu.max", "100000 100000");  // docker run --cpus 1
  CHECK(usable_cpus(self, root.string()) == 1);
  write_file(root / "container/cpu.max", "6400000 100000");  // more than the affinity holds
  CHECK(usable_cpus(self, root.string()) == affinity);
  // This process, as it runs.
  std::ifstream proc("/proc/self/cgroup");
  std::stringstream text;
  text << proc.rdbuf();
  CHECK(usable_cpus() == usable_cpus(text.str(), "/sys/fs/cgroup"));
  CHECK(usable_cpus() <= affinity);
}
