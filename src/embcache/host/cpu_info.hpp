// What CPUs this process may run on.
#pragma once

#include <optional>
#include <string>

namespace embcache {

// The CPUs this process may use, at least 1: those of this thread's affinity mask (inherited
// from the process: taskset, a Slurm job's cpuset, a container's --cpuset-cpus), or every online
// CPU when the mask cannot be read, capped by its cgroup's CPU quota (a container's --cpus, a
// Kubernetes CPU limit; cgroup_cpu_limit). std::thread::hardware_concurrency() counts every
// online CPU of the machine instead: a Slurm task given 4 CPUs of a 64-CPU node would start 64
// encoder threads on 4 CPUs, and a container limited to 2 CPUs would have 64 threads take turns
// on 2 CPUs' worth of time.
int usable_cpus();
// The same, with the text of /proc/self/cgroup and the cgroup mount given (tests use a tree of
// their own).
int usable_cpus(const std::string& self_cgroup, const std::string& cgroup_root);

// The CPU quota of this process's cgroup in whole CPUs, rounded up: the lowest from its group up
// to the root of the hierarchy the quota is set in. `self_cgroup` is the text of
// /proc/self/cgroup; `root` where the hierarchies are mounted (/sys/fs/cgroup). Reads cgroup v2's
// cpu.max and v1's cpu.cfs_quota_us over cpu.cfs_period_us; a group the mount does not show (a
// container's cgroup namespace shows its own group as the root) is read at the root. nullopt
// when no quota is set or none can be read.
std::optional<int> cgroup_cpu_limit(const std::string& self_cgroup, const std::string& root);

}  // namespace embcache
