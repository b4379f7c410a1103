// What the machine did while a benchmark measured something: this process's CPU time, and from
// /proc/stat the time the hypervisor gave the VM's CPUs to others (steal) and the CPU time of
// every other process. A round that is slow with steal or other processes' CPU behind it was
// slowed from outside; one that is slow without is the measured code's own slow mode. Also the
// kernel's own work on each CPU (/proc/interrupts, /proc/softirqs): interrupts and softirqs run
// on the cores the encoder's threads run on, and are counted in nobody's CPU time above.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bench {

// Counts per CPU, by kind.
using PerCpuCounts = std::map<std::string, std::vector<long long>>;

class HostLoad {
 public:
  HostLoad() : start_(now()) {}

  // Since construction: wall, this process's CPU seconds (and their part in the kernel), minor
  // page faults and context switches, all CPUs' steal seconds, and the CPU seconds (user,
  // system, interrupts) of everything but this process.
  nlohmann::json since_start() const {
    const Sample end = now();
    const double wall = end.wall - start_.wall;
    const double own = end.own_cpu - start_.own_cpu;
    const double busy = end.busy - start_.busy;
    nlohmann::json j;
    j["wall_seconds"] = wall;
    j["cpu_seconds"] = own;
    j["system_cpu_seconds"] = end.own_system_cpu - start_.own_system_cpu;  // the kernel's part of it
    j["steal_seconds"] = end.steal - start_.steal;
    j["others_cpu_seconds"] = busy > own ? busy - own : 0.0;
    j["minor_faults"] = end.minor_faults - start_.minor_faults;
    j["context_switches"] = end.context_switches - start_.context_switches;
    j["interrupts"] = difference(end.interrupts, start_.interrupts);
    j["softirqs"] = difference(end.softirqs, start_.softirqs);
    return j;
  }

 private:
  struct Sample {
    double wall = 0, own_cpu = 0, busy = 0, steal = 0;  // -1 where /proc/stat is not readable
    double own_system_cpu = 0;  // in the kernel on this process's behalf: faults, futexes, I/O
    long minor_faults = 0;      // this process's: pages it touched for the first time
    long context_switches = 0;  // this process's threads': waits and preemptions
    PerCpuCounts interrupts;    // by kind: LOC (timer), RES (reschedule), CAL (function calls,
                                // TLB flushes among them), ..., "devices" (all numbered lines)
    PerCpuCounts softirqs;      // by kind: TIMER, BLOCK, RCU, SCHED, ...
  };

  static Sample now() {
    Sample s;
    s.wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    s.own_cpu = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
    s.own_system_cpu = double(usage.ru_stime.tv_sec) + 1e-6 * double(usage.ru_stime.tv_usec);
    s.minor_faults = usage.ru_minflt;
    s.context_switches = usage.ru_nvcsw + usage.ru_nivcsw;
    // "cpu  user nice system idle iowait irq softirq steal guest guest_nice", in clock ticks.
    std::ifstream stat("/proc/stat");
    std::string line, label;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (!std::getline(stat, line)) {
      s.busy = s.steal = -1;
      return s;
    }
    std::istringstream(line) >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    const double tick = 1.0 / double(sysconf(_SC_CLK_TCK));
    s.busy = (user + nice + system + irq + softirq) * tick;
    s.steal = steal * tick;
    s.interrupts = per_cpu_counts("/proc/interrupts");
    s.softirqs = per_cpu_counts("/proc/softirqs");
    return s;
  }

  // The per-CPU columns of /proc/interrupts or /proc/softirqs: a header line naming the CPUs,
  // then "LABEL: n0 n1 ... [description]". Named lines by their label; lines numbered by an IRQ
  // (devices) summed into "devices". Empty where the file is not readable.
  static PerCpuCounts per_cpu_counts(const char* path) {
    PerCpuCounts counts;
    std::ifstream in(path);
    std::string line, word;
    if (!std::getline(in, line)) return counts;
    std::size_t cpus = 0;
    for (std::istringstream header(line); header >> word;) ++cpus;
    const auto is_number = [](const std::string& text) {
      return text.find_first_not_of("0123456789") == std::string::npos;
    };
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string label;
      fields >> label;
      if (label.size() < 2 || label.back() != ':') continue;
      label.pop_back();
      std::vector<long long>& row = counts[is_number(label) ? "devices" : label];
      row.resize(cpus, 0);
      for (std::size_t cpu = 0; cpu < cpus && fields >> word && is_number(word); ++cpu) row[cpu] += std::stoll(word);
    }
    return counts;
  }

  static nlohmann::json difference(const PerCpuCounts& end, const PerCpuCounts& start) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [kind, counts] : end) {
      const auto before = start.find(kind);
      std::vector<long long> delta = counts;
      for (std::size_t cpu = 0; before != start.end() && cpu < delta.size() && cpu < before->second.size(); ++cpu) {
        delta[cpu] -= before->second[cpu];
      }
      j[kind] = delta;
    }
    return j;
  }

  Sample start_;
};

}  // namespace bench
