// What CPUs this process may run on.
#pragma once

namespace embcache {

// The CPUs in this thread's affinity mask (inherited from the process: taskset, a Slurm job's
// cpuset, a container's --cpuset-cpus), at least 1; every online CPU when the mask cannot be read.
// std::thread::hardware_concurrency() counts every online CPU of the machine instead: in a Slurm
// task given 4 CPUs of a 64-CPU node, it would start 64 encoder threads on 4 CPUs.
int usable_cpus();

}  // namespace embcache
