#include "doctest_torch.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "embcache/core/error.hpp"
#include "embcache/core/file_hash_memo.hpp"
#include "embcache/core/sha256.hpp"
#include "test_support.hpp"

using namespace embcache;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("core");

namespace {

void write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

std::vector<fs::path> entries(const std::string& directory) {
  std::vector<fs::path> found;
  if (!fs::exists(directory)) return found;
  for (const auto& e : fs::directory_iterator(directory)) found.push_back(e.path());
  return found;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const std::string kOtherSha(64, 'a');

}  // namespace

TEST_CASE("the file hash memo returns the file's sha256, remembers it, and reads it back while the file is unchanged") {
  testing::TempDir dir;
  const std::string file = dir.file("encoder.pt"), memo_dir = dir.file("memo");
  write_file(file, std::string(2 * 1024 * 1024 + 5, 'e'));
  const std::string sha = sha256_file_hex(file);
  const FileHashMemo memo(memo_dir, /*settle_seconds=*/0);
  REQUIRE(memo.sha256_hex(file) == sha);
  const std::vector<fs::path> made = entries(memo_dir);
  REQUIRE(made.size() == 1);
  REQUIRE(made[0].extension() == ".json");
  testing::replace_in_file(made[0].string(), sha, kOtherSha);  // the entry made to say another digest
  REQUIRE(memo.sha256_hex(file) == kOtherSha);                  // read from the memo, not the file
  // Through another path to the same file (a symlink): the same identity, the same entry.
  fs::create_symlink(file, dir.file("link.pt"));
  REQUIRE(memo.sha256_hex(dir.file("link.pt")) == kOtherSha);
  REQUIRE(entries(memo_dir).size() == 1);
}

TEST_CASE("the file hash memo hashes again when the file changes, even at the same size and modification time") {
  testing::TempDir dir;
  const std::string file = dir.file("encoder.pt"), memo_dir = dir.file("memo");
  write_file(file, std::string(4096, 'a'));
  const FileHashMemo memo(memo_dir, 0);
  const std::string sha = sha256_file_hex(file);
  REQUIRE(memo.sha256_hex(file) == sha);
  testing::replace_in_file(entries(memo_dir).at(0).string(), sha, kOtherSha);
  struct stat before {};
  REQUIRE(::stat(file.c_str(), &before) == 0);
  write_file(file, std::string(4096, 'b'));  // same size
  const timespec times[2] = {before.st_atim, before.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, file.c_str(), times, 0) == 0);  // modification time put back
  struct stat after {};
  REQUIRE(::stat(file.c_str(), &after) == 0);
  REQUIRE(after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
  REQUIRE(after.st_mtim.tv_sec == before.st_mtim.tv_sec);
  // The status-change time moved (the kernel sets it; nothing sets it back): the file is hashed.
  REQUIRE(memo.sha256_hex(file) == sha256_hex(std::string(4096, 'b')));
  // Its entry replaced the old one: one entry per path, however often the file is rewritten.
  REQUIRE(entries(memo_dir).size() == 1);
  REQUIRE(memo.sha256_hex(file) == sha256_hex(std::string(4096, 'b')));
}

TEST_CASE("the file hash memo remembers nothing for a file changed within the settle time") {
  testing::TempDir dir;
  const std::string file = dir.file("encoder.pt"), memo_dir = dir.file("memo");
  write_file(file, "fresh");
  const FileHashMemo memo(memo_dir);  // the default 60 s: this file was written just now
  REQUIRE(memo.sha256_hex(file) == sha256_hex("fresh"));
  REQUIRE(entries(memo_dir).empty());
}

TEST_CASE("the file hash memo passes over entries it cannot use, and a memo it cannot write") {
  testing::TempDir dir;
  const std::string file = dir.file("encoder.pt"), memo_dir = dir.file("memo");
  write_file(file, "weights");
  const std::string sha = sha256_hex("weights");
  const FileHashMemo memo(memo_dir, 0);
  REQUIRE(memo.sha256_hex(file) == sha);
  const fs::path entry = entries(memo_dir).at(0);
  for (const std::string& broken : {std::string("{\"identity\": "), std::string("[]"),
                                    std::string("{\"identity\": {}, \"sha256\": \"" + kOtherSha + "\"}")}) {
    CAPTURE(broken);
    write_file(entry.string(), broken);
    REQUIRE(memo.sha256_hex(file) == sha);  // hashed, and the entry written again
    REQUIRE(memo.sha256_hex(file) == sha);
  }
  testing::replace_in_file(entry.string(), sha, "not hex" + std::string(57, 'z'));
  REQUIRE(memo.sha256_hex(file) == sha);
  // A memo directory that cannot be made (a file is in its place): hashed every time.
  write_file(dir.file("blocked"), "");
  const FileHashMemo blocked(dir.file("blocked") + "/memo", 0);
  REQUIRE(blocked.sha256_hex(file) == sha);
  // No memo at all, and a file that cannot be read: the same InputError as without a memo.
  REQUIRE(FileHashMemo(std::nullopt).sha256_hex(file) == sha);
  REQUIRE_THROWS_AS(memo.sha256_hex(dir.file("missing.pt")), InputError);
}

TEST_CASE("writing a memo entry removes those of files that are gone and those named before one entry per path") {
  testing::TempDir dir;
  const std::string memo_dir = dir.file("memo");
  const FileHashMemo memo(memo_dir, 0);
  for (const char* name : {"a.pt", "b.pt"}) {
    write_file(dir.file(name), name);
    REQUIRE(memo.sha256_hex(dir.file(name)) == sha256_hex(name));
  }
  REQUIRE(entries(memo_dir).size() == 2);
  // b.pt's entry as it was named before (by the whole identity), another program's file, a
  // rename's temporary file, and an entry that does not parse: only the first is the memo's to drop.
  fs::path b_entry;
  for (const fs::path& e : entries(memo_dir)) {
    if (read_text(e).find("b.pt") != std::string::npos) b_entry = e;
  }
  REQUIRE_FALSE(b_entry.empty());
  fs::copy_file(b_entry, memo_dir + "/0123456789abcdef0123456789abcdef.json");
  write_file(memo_dir + "/notes.txt", "kept");
  write_file(memo_dir + "/x.json.1234-5.tmp", "kept");
  write_file(memo_dir + "/broken.json", "{");
  fs::remove(dir.file("a.pt"));
  write_file(dir.file("c.pt"), "c.pt");
  REQUIRE(memo.sha256_hex(dir.file("c.pt")) == sha256_hex("c.pt"));
  std::vector<std::string> names;
  for (const fs::path& e : entries(memo_dir)) names.push_back(e.filename().string());
  std::sort(names.begin(), names.end());
  CAPTURE(names.size());
  REQUIRE(names.size() == 5);  // b.pt's and c.pt's entries, and the three files that are not entries
  CHECK(std::count(names.begin(), names.end(), b_entry.filename().string()) == 1);
  CHECK(std::count(names.begin(), names.end(), "0123456789abcdef0123456789abcdef.json") == 0);
  CHECK(std::count(names.begin(), names.end(), "notes.txt") == 1);
  CHECK(std::count(names.begin(), names.end(), "broken.json") == 1);
  CHECK(std::count(names.begin(), names.end(), "x.json.1234-5.tmp") == 1);
  // b.pt is still read from the memo.
  testing::replace_in_file(b_entry.string(), sha256_hex("b.pt"), kOtherSha);
  CHECK(memo.sha256_hex(dir.file("b.pt")) == kOtherSha);
}

TEST_CASE("the file hash memo's directory comes from EMBCACHE_HASH_MEMO, else the user's cache directory") {
  testing::ScopedEnv memo_env("EMBCACHE_HASH_MEMO", "/somewhere/memo");
  REQUIRE(FileHashMemo::from_environment().directory() == std::optional<std::string>("/somewhere/memo"));
  {
    testing::ScopedEnv off("EMBCACHE_HASH_MEMO", "off");
    REQUIRE_FALSE(FileHashMemo::from_environment().directory().has_value());
  }
  testing::ScopedEnv unset("EMBCACHE_HASH_MEMO", std::nullopt);
  testing::ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
  REQUIRE(FileHashMemo::from_environment().directory() == std::optional<std::string>("/xdg/embcache/sha256"));
  testing::ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
  testing::ScopedEnv home("HOME", "/home/u");
  REQUIRE(FileHashMemo::from_environment().directory() == std::optional<std::string>("/home/u/.cache/embcache/sha256"));
  testing::ScopedEnv no_home("HOME", std::nullopt);
  REQUIRE_FALSE(FileHashMemo::from_environment().directory().has_value());
}

TEST_SUITE_END();
