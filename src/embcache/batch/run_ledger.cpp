#include "embcache/batch/run_ledger.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "embcache/core/error.hpp"
#include "embcache/core/files.hpp"

namespace embcache {
namespace {

void write_all(int fd, const std::string& data, const std::string& path) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw IoError(path + ": cannot append to the ledger (" + std::strerror(errno) + ")");
    done += std::size_t(n);
  }
}

void append_durably(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(path + ": cannot open the ledger (" + std::strerror(errno) + ")");
  try {
    write_all(fd, data, path);
    if (::fsync(fd) != 0) throw IoError(path + ": fsync failed (" + std::string(std::strerror(errno)) + ")");
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace

RunLedger::RunLedger(const std::string& output_dir, int study_version)
    : path_(output_dir + "/ledger.jsonl"), version_(study_version) {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t start = 0, line_no = 0, good_end = 0;
  while (start < text.size()) {
    const auto newline = text.find('\n', start);
    ++line_no;
    if (newline == std::string::npos) break;  // torn last line: the crash happened mid-append
    const std::string line = text.substr(start, newline - start);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw InputError(path_ + ": line " + std::to_string(line_no) + " is not JSON; the ledger is corrupted. "
                       "Move it away to rerun every run of the study");
    }
    if (line_no == 1) {
      if (!j.is_object() || !j.contains("embcache_ledger")) {
        throw InputError(path_ + ": line 1 is not an embcache ledger header; the ledger is corrupted. Move it away "
                         "to rerun every run of the study");
      }
      if (j.value("study_version", -1) != version_) {
        throw InputError(path_ + ": written for study version " + j.value("study_version", nlohmann::json(-1)).dump() +
                         ", this config is version " + std::to_string(version_) +
                         "; use a new output_dir (or move the ledger away to rerun everything)");
      }
    } else if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) {
      throw InputError(path_ + ": line " + std::to_string(line_no) + " has no run id; the ledger is corrupted. "
                       "Move it away to rerun every run of the study");
    } else {
      rows_[j["id"].get<std::string>()] = j;
    }
    good_end = newline + 1;
    start = newline + 1;
  }
  if (good_end < text.size()) {
    // Drop the torn tail so the next append starts on a fresh line.
    std::error_code ec;
    std::filesystem::resize_file(path_, good_end, ec);
    if (ec) throw IoError(path_ + ": cannot repair the torn last line (" + ec.message() + ")");
  }
}

void RunLedger::append(const std::vector<nlohmann::json>& rows) {
  std::string data;
  if (!std::filesystem::exists(path_) || file_bytes(path_, "the run ledger") == 0) {
    data += nlohmann::json{{"embcache_ledger", 1}, {"study_version", version_}}.dump() + "\n";
  }
  for (const auto& row : rows) data += row.dump() + "\n";
  append_durably(path_, data);
  for (const auto& row : rows) rows_[row["id"].get<std::string>()] = row;
}

}  // namespace embcache
