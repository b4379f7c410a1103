#include "embcache/store/retired_views.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <unordered_set>

#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/h5/h5.hpp"
#include "embcache/store/cache_parts.hpp"
#include "embcache/store/part_installer.hpp"

namespace fs = std::filesystem;

namespace embcache {
namespace {

std::string retired_dir_of(const std::string& cache_path) { return parts_dir_of(cache_path) + "/retired"; }

// Whether another process has `path` open through HDF5 (which holds a shared flock on it). A
// file this process cannot open is not held by anyone it could protect.
bool held_by_a_reader(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

// The file names (in the parts folder) of the parts a view file names; none when it is not a
// view or cannot be read (a retired view this process cannot read protects nothing).
void add_named_parts(const std::string& view_path, std::unordered_set<std::string>& names) {
  try {
    const h5::File file = h5::open_file(view_path, /*writable=*/false);
    if (!is_view_file(file)) return;
    for (const CachePart& part : read_view_table(file, view_path).parts) {
      names.insert(fs::path(part.file).filename().string());
    }
  } catch (const Error&) {
  }
}

}  // namespace

void retire_view(const std::string& cache_path) {
  const std::string dir = retired_dir_of(cache_path);
  make_directories(dir, "cache parts folder");
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const std::string name = dir + "/" + std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()) +
                           "-" + std::to_string(::getpid()) + ".h5";
  std::error_code ec;
  fs::create_hard_link(cache_path, name, ec);  // no hard links: no protection, nothing lost
}

std::int64_t sweep_parts(const std::string& cache_path) {
  const std::string parts_dir = parts_dir_of(cache_path);
  const std::string retired_dir = retired_dir_of(cache_path);
  std::unordered_set<std::string> named;
  std::int64_t kept = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(retired_dir, ec)) {
    const std::string path = entry.path().string();
    if (!held_by_a_reader(path)) {
      fs::remove(path, ec);
      continue;
    }
    ++kept;
    add_named_parts(path, named);
  }
  if (fs::exists(cache_path, ec)) add_named_parts(cache_path, named);
  for (const auto& entry : fs::directory_iterator(parts_dir, ec)) {
    if (entry.is_regular_file(ec) && !named.count(entry.path().filename().string())) fs::remove(entry.path(), ec);
  }
  fs::remove(retired_dir, ec);  // only when empty
  fs::remove(parts_dir, ec);    // likewise
  return kept;
}

}  // namespace embcache
