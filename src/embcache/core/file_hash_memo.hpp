// SHA-256 of files, remembered across processes by each file's identity, so that a precompute
// with an encoder file it has hashed before does not read all of it again.
#pragma once

#include <optional>
#include <string>

namespace embcache {

// The identity a remembered hash is tied to: the file's resolved path, inode, size,
// modification and status-change times (ns). The kernel sets the status-change time on every
// write, rename or chmod, and no call can set it back, so an identity that matches names the
// same bytes. Hashes are remembered only for files whose times are `settle_seconds` in the past
// when the hash starts: on a file system with coarse times (1 s, or another machine's clock), a
// rewrite in the same tick as the hash would keep the times it had.
class FileHashMemo {
 public:
  static constexpr double kSettleSeconds = 60;

  // No directory: nothing is remembered, every call hashes the file.
  explicit FileHashMemo(std::optional<std::string> directory, double settle_seconds = kSettleSeconds);

  // $EMBCACHE_HASH_MEMO when set ("off": nothing remembered), else $XDG_CACHE_HOME/embcache/sha256,
  // else $HOME/.cache/embcache/sha256; nothing remembered when none of these is set.
  static FileHashMemo from_environment();

  // The file's SHA-256 (hex), from the memo when its identity matches the one remembered for its
  // resolved path, else read and remembered (replacing that path's entry; writing an entry also
  // removes those of files no longer on this machine, so the memo keeps one entry per existing
  // path). The memo is only a shortcut: an entry that cannot be read, parsed or written is
  // passed over. Throws InputError naming the path when the file cannot be read.
  std::string sha256_hex(const std::string& path) const;

  const std::optional<std::string>& directory() const { return directory_; }

 private:
  std::optional<std::string> directory_;
  double settle_seconds_;
};

}  // namespace embcache
