// The ledger of a study (OUTPUT_DIR/ledger.jsonl): one JSON line per finished run, appended and
// fsync'ed as runs finish, so a rerun after a crash knows what is done.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace embcache {

class RunLedger {
 public:
  // Reads OUTPUT_DIR/ledger.jsonl when it exists. InputError for a corrupted ledger or one written
  // for another study version. A torn last line (a crash mid-append) is dropped and rewritten.
  RunLedger(const std::string& output_dir, int study_version);

  bool finished(const std::string& id) const { return rows_.count(id) > 0; }
  const nlohmann::json& row(const std::string& id) const { return rows_.at(id); }
  // Appends the rows (each with an "id") in one write and fsyncs; later rows for an id replace
  // earlier ones when read back.
  void append(const std::vector<nlohmann::json>& rows);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int version_;
  std::map<std::string, nlohmann::json> rows_;
};

}  // namespace embcache
