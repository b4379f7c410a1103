#include "embcache/host/cpu_info.hpp"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace embcache {
namespace {

namespace fs = std::filesystem;
// One hierarchy's limit, read in one group's directory (v2_limit, v1_limit).
using Limit = std::optional<int> (*)(const fs::path& group_dir);

std::optional<std::string> first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  if (in && std::getline(in, line)) return line;
  return std::nullopt;
}

std::optional<long long> as_integer(const std::string& text) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// `quota` microseconds of CPU time per `period`: the CPUs that keeps busy, rounded up.
std::optional<int> quota_cpus(std::optional<long long> quota, std::optional<long long> period) {
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;  // v1 writes -1 for none
  return int(std::max<long long>(1, (*quota + *period - 1) / *period));
}

// cgroup v2: cpu.max holds "max 100000" (no quota) or "200000 100000".
std::optional<int> v2_limit(const fs::path& dir) {
  const auto line = first_line(dir / "cpu.max");
  if (!line) return std::nullopt;
  std::istringstream fields(*line);
  std::string quota, period;
  if (!(fields >> quota >> period) || quota == "max") return std::nullopt;
  return quota_cpus(as_integer(quota), as_integer(period));
}

// cgroup v1's cpu controller.
std::optional<int> v1_limit(const fs::path& dir) {
  const auto quota = first_line(dir / "cpu.cfs_quota_us"), period = first_line(dir / "cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  return quota_cpus(as_integer(*quota), as_integer(*period));
}

// The lowest limit of `group` (as /proc/self/cgroup names it) and its ancestors under `mount`.
std::optional<int> lowest_limit(const fs::path& mount, const std::string& group, Limit limit) {
  fs::path relative = fs::path(group).relative_path();
  std::error_code ec;
  if (!fs::is_directory(mount / relative, ec)) relative.clear();
  std::optional<int> lowest;
  while (true) {
    if (const auto l = limit(mount / relative)) lowest = lowest ? std::min(*lowest, *l) : *l;
    if (relative.empty()) return lowest;
    relative = relative.parent_path();
  }
}

std::optional<int> lower(std::optional<int> a, std::optional<int> b) {
  if (a && b) return std::min(*a, *b);
  return a ? a : b;
}

bool lists_cpu(const std::string& controllers) {
  std::istringstream names(controllers);
  std::string name;
  while (std::getline(names, name, ',')) {
    if (name == "cpu") return true;
  }
  return false;
}

// The limit a line of /proc/self/cgroup ("hierarchy-id:controllers:path") sets: cgroup v2's
// line is "0::path", mounted at the root; v1's cpu controller is mounted as its controllers
// ("cpu,cpuacct") or as "cpu".
std::optional<int> line_limit(const std::string& line, const fs::path& root) {
  const auto first = line.find(':'), second = first == std::string::npos ? first : line.find(':', first + 1);
  if (second == std::string::npos) return std::nullopt;
  const std::string controllers = line.substr(first + 1, second - first - 1), group = line.substr(second + 1);
  if (controllers.empty()) return lowest_limit(root, group, v2_limit);
  if (!lists_cpu(controllers)) return std::nullopt;
  std::error_code ec;
  return lowest_limit(fs::is_directory(root / controllers, ec) ? root / controllers : root / "cpu", group, v1_limit);
}

}  // namespace

std::optional<int> cgroup_cpu_limit(const std::string& self_cgroup, const std::string& root) {
  std::optional<int> limit;
  std::istringstream lines(self_cgroup);
  std::string line;
  while (std::getline(lines, line)) limit = lower(limit, line_limit(line, root));
  return limit;
}

int usable_cpus(const std::string& self_cgroup, const std::string& cgroup_root) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  int cpus = sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed)
                                                                  : int(std::thread::hardware_concurrency());
  if (const auto quota = cgroup_cpu_limit(self_cgroup, cgroup_root)) cpus = std::min(cpus, *quota);
  return std::max(1, cpus);
}

int usable_cpus() {
  std::ifstream self("/proc/self/cgroup");
  std::stringstream text;
  text << self.rdbuf();
  return usable_cpus(text.str(), "/sys/fs/cgroup");
}

}  // namespace embcache
