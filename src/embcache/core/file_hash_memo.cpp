#include "embcache/core/file_hash_memo.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"
#include "embcache/core/sha256.hpp"

namespace embcache {
namespace {

std::int64_t nanoseconds(const timespec& t) { return std::int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; }

struct Identity {
  nlohmann::json fields;            // what an entry must match
  std::int64_t newest_time_ns = 0;  // the later of the file's modification and status-change times
};

std::optional<Identity> identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return std::nullopt;
  Identity id;
  // No device number: a network file system's differs from client to client, and the shards
  // of an array on several machines then could not share what one of them hashed.
  id.fields = {{"path", std::string(resolved)},
               {"inode", std::uint64_t(st.st_ino)},
               {"size", std::int64_t(st.st_size)},
               {"mtime_ns", nanoseconds(st.st_mtim)},
               {"ctime_ns", nanoseconds(st.st_ctim)}};
  std::free(resolved);
  id.newest_time_ns = std::max(nanoseconds(st.st_mtim), nanoseconds(st.st_ctim));
  return id;
}

bool is_sha256_hex(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

std::optional<std::string> remembered(const std::string& entry, const nlohmann::json& fields) {
  std::ifstream in(entry);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("identity", nlohmann::json()) != fields) return std::nullopt;
  const nlohmann::json& sha = j.value("sha256", nlohmann::json());
  if (!sha.is_string() || !is_sha256_hex(sha.get<std::string>())) return std::nullopt;
  return sha.get<std::string>();
}

// One entry per resolved path: a file rewritten in place replaces its old entry.
std::string entry_name(const std::string& resolved_path) {
  return embcache::sha256_hex(resolved_path).substr(0, 32) + ".json";
}

// Whether nothing is at the path on this machine (not: it could not be looked at).
bool is_gone(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR);
}

// Entries that are never read again: those of files that are gone, and those named by the whole
// identity (before one entry per path). Files that are not entries (another program's, a
// rename's temporary) are left alone. Swept when an entry is written, which is rare (a file hashed
// anew), so reading every entry then costs little; the memo stays one entry per existing path.
void sweep(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path entry = it->path();
    if (entry.extension() != ".json") continue;
    std::ifstream in(entry);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("identity") || !j["identity"].is_object()) continue;
    const nlohmann::json& path = j["identity"].value("path", nlohmann::json());
    if (!path.is_string()) continue;
    const std::string resolved = path.get<std::string>();
    if (entry.filename() != entry_name(resolved) || is_gone(resolved)) {
      std::error_code ignored;  // another process may have swept it first
      fs::remove(entry, ignored);
    }
  }
}

// Renamed into place (write_text_atomically): a reader, or a shard on another machine writing the
// same entry, never sees half of one. A memo that cannot be written is passed over.
void remember(const std::string& directory, const std::string& entry, const nlohmann::json& fields,
              const std::string& sha) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) return;
  try {
    write_text_atomically(entry, nlohmann::json{{"identity", fields}, {"sha256", sha}}.dump() + "\n", "hash memo");
  } catch (const IoError&) {
    return;
  }
  sweep(directory);
}

std::int64_t wall_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<std::string> non_empty_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

}  // namespace

FileHashMemo::FileHashMemo(std::optional<std::string> directory, double settle_seconds)
    : directory_(std::move(directory)), settle_seconds_(settle_seconds) {}

FileHashMemo FileHashMemo::from_environment() {
  if (const auto memo = non_empty_env("EMBCACHE_HASH_MEMO")) {
    if (*memo == "off") return FileHashMemo(std::nullopt);
    return FileHashMemo(*memo);
  }
  if (const auto xdg = non_empty_env("XDG_CACHE_HOME")) return FileHashMemo(*xdg + "/embcache/sha256");
  if (const auto home = non_empty_env("HOME")) return FileHashMemo(*home + "/.cache/embcache/sha256");
  return FileHashMemo(std::nullopt);
}

std::string FileHashMemo::sha256_hex(const std::string& path) const {
  if (!directory_) return sha256_file_hex(path);
  const std::int64_t started_ns = wall_clock_ns();
  const std::optional<Identity> before = identity_of(path);
  if (!before) return sha256_file_hex(path);  // not a readable regular file: its error, as without a memo
  const std::string entry = *directory_ + "/" + entry_name(before->fields["path"].get<std::string>());
  if (std::optional<std::string> sha = remembered(entry, before->fields)) return *sha;
  std::string sha = sha256_file_hex(path);
  const std::optional<Identity> after = identity_of(path);
  const bool settled = double(started_ns - before->newest_time_ns) >= settle_seconds_ * 1e9;
  if (settled && after && after->fields == before->fields) remember(*directory_, entry, before->fields, sha);
  return sha;
}

}  // namespace embcache
