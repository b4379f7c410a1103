// Small file helpers: atomic replacement of result files, and file-system calls whose failures
// (a full disk, a permission) are IoErrors naming the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace embcache {

// Writes `text` to `path` through a file beside it of this process and thread, then a rename,
// so readers never see half a file, and concurrent writers of one path never mix theirs.
// `what` names the option or output in the IoError.
void write_text_atomically(const std::string& path, const std::string& text, const std::string& what);

// std::filesystem's create_directories, rename and file_size; `what` names the option or output
// the path belongs to in the IoError.
void make_directories(const std::string& path, const std::string& what);
void move_into_place(const std::string& from, const std::string& to, const std::string& what);
std::int64_t file_bytes(const std::string& path, const std::string& what);
// fsync of a file or a directory (a directory: the names created, renamed or removed in it).
void sync_path(const std::string& path);

// Reads `path` to its end with read(2), handing each block to `block`; returns 0, or the errno
// of the open or read that failed.
int read_file_blocks(const std::string& path, const std::function<void(const char* data, std::size_t size)>& block);

}  // namespace embcache
