#include "embcache/core/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "embcache/core/error.hpp"

namespace embcache {

void write_text_atomically(const std::string& path, const std::string& text, const std::string& what) {
  // Named by process and thread: writers of the same path at once (shards sharing a hash memo)
  // never write into one another's file.
  const std::string tmp = path + "." + std::to_string(::getpid()) + "-" +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id())) + ".tmp";
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary);
    if (!out) {
      throw IoError(what + " " + path + ": cannot write (" + (errno ? std::strerror(errno) : "directory missing or not writable") + ")");
    }
    errno = 0;
    out << text;
    out.flush();
    if (!out) {
      const int error = errno;
      std::remove(tmp.c_str());
      throw IoError(what + " " + path + ": write failed (" + (error ? std::strerror(error) : "disk full?") + ")");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    throw IoError(what + " " + path + ": cannot rename into place (" + std::strerror(error) + ")");
  }
}

void make_directories(const std::string& path, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw IoError(what + " " + path + ": cannot create the directory (" + ec.message() + ")");
}

void move_into_place(const std::string& from, const std::string& to, const std::string& what) {
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec) throw IoError(what + " " + to + ": cannot move " + from + " into place (" + ec.message() + ")");
}

void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open " + path + " to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw IoError("cannot sync " + path + ": " + std::strerror(saved));
}

std::int64_t file_bytes(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(what + " " + path + ": cannot read its size (" + ec.message() + ")");
  return std::int64_t(bytes);
}

int read_file_blocks(const std::string& path, const std::function<void(const char* data, std::size_t size)>& block) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  std::vector<char> buffer(1 << 20);
  int error = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got > 0) {
      block(buffer.data(), std::size_t(got));
    } else if (got == 0 || errno != EINTR) {
      error = got < 0 ? errno : 0;
      break;
    }
  }
  ::close(fd);
  return error;
}

}  // namespace embcache
