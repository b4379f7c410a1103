#include "embcache/batch/study_config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "embcache/core/error.hpp"
#include "embcache/core/limits.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/core/sha256.hpp"
#include "embcache/pipeline/precompute_plan.hpp"
#include "embcache/probe/probe_plan.hpp"

namespace embcache {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// Collects problems; each is one line naming its place.
struct Problems {
  std::string file;
  std::vector<std::string> lines;
  void add(const std::string& where, const std::string& what) {
    lines.push_back(file + ": " + (where.empty() ? "" : where + ": ") + what);
  }
};

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string unknown_key(const std::string& key, const std::vector<std::string>& known) {
  // Names people bring from other tools.
  static const std::map<std::string, std::string> aliases = {
      {"learning_rate", "lr"}, {"wd", "weight_decay"}, {"bs", "batch_size"}, {"n_epochs", "epochs"},
      {"num_epochs", "epochs"}, {"level", "levels"}, {"heads", "head"}, {"caches", "cache"}, {"output", "output_dir"},
      {"out_dir", "output_dir"}, {"probe", "probes"}, {"precomputes", "precompute"}, {"model", "encoder"}};
  const auto alias = aliases.find(key);
  if (alias != aliases.end() && std::find(known.begin(), known.end(), alias->second) != known.end()) {
    return "unknown key \"" + key + "\"; did you mean \"" + alias->second + "\"?";
  }
  std::string best;
  std::size_t best_d = std::max<std::size_t>(3, key.size() / 3);  // suggest only close names
  for (const auto& k : known) {
    const std::size_t d = edit_distance(key, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return "unknown key \"" + key + "\"" + (best.empty() ? "" : "; did you mean \"" + best + "\"?");
}

std::string describe(const Json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::array: return "a list";
    case Json::value_t::object: return "an object";
    case Json::value_t::null: return "null";
    default: return "a number";
  }
}

// A JSON scalar as option text: strings as they are, numbers with every digit they need to read
// back as the same double (`"mean": [1370.19151926]` once became "1370.19").
bool scalar_text(const Json& v, std::string* out) {
  if (v.is_string()) *out = v.get<std::string>();
  else if (v.is_number_integer() || v.is_number_unsigned()) *out = v.dump();
  else if (v.is_number_float()) *out = exact_number_text(v.get<double>());
  else return false;
  return true;
}

// Whether the whole number `v` fits V without wrapping.
template <class V>
bool fits(const Json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<V>::max());
  const std::int64_t x = v.get<std::int64_t>();
  if constexpr (std::is_unsigned_v<V>) {
    return x >= 0 && std::uint64_t(x) <= std::uint64_t(std::numeric_limits<V>::max());
  } else {
    return x >= std::int64_t(std::numeric_limits<V>::min()) && x <= std::int64_t(std::numeric_limits<V>::max());
  }
}

// Assigns one JSON value (already a single run's value, no grid) to a field. Returns false and
// records the problem when the type is wrong.
template <class T>
bool assign(const OptionField<T>& field, const Json& v, T& options, const std::string& where, Problems& problems) {
  bool ok = true;
  std::visit(
      [&](auto member) {
        auto& target = options.*member;
        using V = std::decay_t<decltype(target)>;
        if constexpr (std::is_same_v<V, std::string>) {
          using S = typename OptionField<T>::Shape;
          std::string text;
          if (v.is_array() && field.shape != S::kScalar) {
            const char* sep = field.shape == S::kLevelSets ? "+" : ",";
            for (std::size_t i = 0; i < v.size(); ++i) {
              std::string item;
              if (field.numeric && !v[i].is_number()) {
                problems.add(where + "[" + std::to_string(i) + "]", "expected a number, got " + describe(v[i]));
                ok = false;
                return;
              }
              if (!scalar_text(v[i], &item)) {
                problems.add(where + "[" + std::to_string(i) + "]", std::string("expected a string or a number, got ") + describe(v[i]));
                ok = false;
                return;
              }
              text += (i ? sep : "") + item;
            }
          } else if (field.numeric && !v.is_number()) {
            problems.add(where, "expected a number, got " + describe(v));
            ok = false;
            return;
          } else if (!scalar_text(v, &text)) {
            problems.add(where, std::string("expected a string or a number, got ") + type_name(v) + " " + describe(v));
            ok = false;
            return;
          }
          target = text;
        } else if constexpr (std::is_same_v<V, bool>) {
          if (!v.is_boolean()) {
            problems.add(where, "expected true or false, got " + describe(v));
            ok = false;
            return;
          }
          target = field.negated ? !v.get<bool>() : v.get<bool>();
        } else if constexpr (std::is_same_v<V, double>) {
          if (!v.is_number()) {
            problems.add(where, "expected a number, got " + describe(v));
            ok = false;
            return;
          }
          target = v.get<double>();
        } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {
          ok = false;  // not settable from JSON (in_json = false)
        } else {
          if (!(v.is_number_integer() || v.is_number_unsigned()) || !fits<V>(v)) {
            problems.add(where, "expected a whole number from " + std::to_string(std::numeric_limits<V>::min()) + " to " +
                                    std::to_string(std::numeric_limits<V>::max()) + ", got " + describe(v));
            ok = false;
            return;
          }
          target = v.get<V>();
        }
      },
      field.member);
  return ok;
}

template <class T>
const OptionField<T>* find_field(const std::vector<OptionField<T>>& fields, const std::string& key) {
  for (const auto& f : fields) {
    if (f.in_json && f.json_key() == key) return &f;
  }
  return nullptr;
}

template <class T>
std::vector<std::string> json_keys(const std::vector<OptionField<T>>& fields, std::vector<std::string> extra) {
  for (const auto& f : fields) {
    if (f.in_json) extra.push_back(f.json_key());
  }
  return extra;
}

std::string absolute(const fs::path& base, const std::string& p) {
  if (p.empty()) return p;
  const fs::path path(p);
  return (path.is_absolute() ? path : base / path).lexically_normal().string();
}

// Does a value of this field form a grid (several runs) rather than one value?
template <class T>
bool is_grid_value(const OptionField<T>& field, const Json& v) {
  if (!v.is_array()) return false;
  using S = typename OptionField<T>::Shape;
  if (field.shape == S::kScalar) return true;
  if (field.shape == S::kList && field.grid) return true;  // lr, weight decay, head: one run per value
  return std::any_of(v.begin(), v.end(), [](const Json& x) { return x.is_array(); });
}

std::string value_label(const Json& v) {
  if (v.is_array()) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::string item;
      scalar_text(v[i], &item);
      s += (i ? "+" : "") + item;
    }
    return s;
  }
  std::string s;
  if (!scalar_text(v, &s)) s = v.dump();
  return s;
}

// A folder name made of `text` that stays inside the folder it is made in: no separators, and
// never "", "." or "..".
std::string slug(const std::string& text) {
  std::string s;
  for (char c : text) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  if (s.find_first_not_of('.') == std::string::npos) s = "_" + s;
  return s;
}

Json merged(const Json& defaults, const Json& entry) {
  Json out = defaults.is_object() ? defaults : Json::object();
  for (const auto& [k, v] : entry.items()) out[k] = v;
  return out;
}

// Parses one study file; every problem is collected in `problems_` and reported at the end.
class StudyParser {
 public:
  explicit StudyParser(const std::string& path) : problems_{path, {}}, path_(path) {}

  Study parse() {
    root_ = parse_json();
    study_.path = fs::absolute(path_).lexically_normal().string();
    base_ = fs::path(study_.path).parent_path();
    parse_header();
    if (root_.contains("precompute") && !root_["precompute"].is_array()) problems_.add("precompute", "expected a list of entries");
    if (root_.contains("precompute") && root_["precompute"].is_array()) {
      for (std::size_t i = 0; i < root_["precompute"].size(); ++i) {
        const std::string where = "precompute[" + std::to_string(i) + "]";
        if (!root_["precompute"][i].is_object()) {
          problems_.add(where, "expected an object");
        } else {
          parse_precompute(where, root_["precompute"][i]);
        }
      }
    }
    if (root_.contains("probes") && !root_["probes"].is_array()) problems_.add("probes", "expected a list of entries");
    if (root_.contains("probes") && root_["probes"].is_array()) {
      for (std::size_t i = 0; i < root_["probes"].size(); ++i) {
        const std::string where = "probes[" + std::to_string(i) + "]";
        if (!root_["probes"][i].is_object()) {
          problems_.add(where, "expected an object");
        } else {
          parse_probe(where, root_["probes"][i]);
        }
      }
    }
    report();
    return std::move(study_);
  }

 private:
  Json parse_json() {
    const std::string& path = path_;
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path + ": cannot read the study config (missing or not readable)");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Json root;
    // A key given twice in one object: JSON parsers keep one of the two (nlohmann the last), so
    // one of the values the file states would be ignored without a word.
    std::vector<std::pair<std::set<std::string>, std::string>> objects;  // keys seen, and the key it is under
    std::string last_key = "the top level", duplicate;
    const auto check_keys = [&](int, nlohmann::json::parse_event_t event, Json& parsed) {
      using Event = nlohmann::json::parse_event_t;
      if (event == Event::object_start) objects.emplace_back(std::set<std::string>{}, last_key);
      if (event == Event::object_end && !objects.empty()) objects.pop_back();
      if (event == Event::key && parsed.is_string()) {
        last_key = parsed.get<std::string>();
        if (!objects.empty() && !objects.back().first.insert(last_key).second && duplicate.empty()) {
          duplicate = "\"" + last_key + "\" is given twice in the object under \"" + objects.back().second + "\"";
        }
      }
      return true;
    };
    try {
      root = Json::parse(text, check_keys);
    } catch (const nlohmann::json::parse_error& e) {
      std::size_t line = 1, column = 1;
      for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
        if (text[i] == '\n') {
          ++line;
          column = 1;
        } else {
          ++column;
        }
      }
      std::string reason = e.what();
      const auto colon = reason.rfind(": ");
      if (colon != std::string::npos) reason = reason.substr(colon + 2);
      throw InputError(path + ":" + std::to_string(line) + ":" + std::to_string(column) + ": malformed JSON: " + reason);
    } catch (const nlohmann::json::exception& e) {  // a number out of range: "number overflow parsing '1e400'"
      std::string reason = e.what();
      const auto bracket = reason.find("] ");
      if (bracket != std::string::npos) reason = reason.substr(bracket + 2);
      throw InputError(path + ": malformed JSON: " + reason);
    }
    if (!duplicate.empty()) throw InputError(path + ": " + duplicate + "; give each key once");
    if (!root.is_object()) throw InputError(path + ": expected a JSON object at the top level");
    return root;
  }

  // version, output_dir, defaults, and unknown top-level keys.
  void parse_header() {
    for (const auto& [key, value] : root_.items()) {
      if (key != "version" && key != "output_dir" && key != "defaults" && key != "precompute" && key != "probes" &&
          key != "executor") {
        problems_.add("", unknown_key(key, {"version", "output_dir", "defaults", "precompute", "probes", "executor"}));
      }
    }
    if (root_.contains("executor")) parse_executor(root_["executor"]);
    if (!root_.contains("version")) {
      problems_.add("version", "missing; write \"version\": 1");
    } else if (!root_["version"].is_number_integer() || root_["version"].get<int>() != kStudyVersion) {
      problems_.add("version", "this embcache reads study version 1, got " + describe(root_["version"]));
    }
    if (!root_.contains("output_dir") || !root_["output_dir"].is_string() || root_["output_dir"].get<std::string>().empty()) {
      problems_.add("output_dir", "missing or not a string; name the directory for caches, runs and results");
    } else {
      study_.output_dir = absolute(base_, root_["output_dir"].get<std::string>());
      if (fs::exists(study_.output_dir) && !fs::is_directory(study_.output_dir)) {
        problems_.add("output_dir", study_.output_dir + " exists and is not a directory; choose another output_dir");
      }
    }
    if (root_.contains("defaults")) {
      const Json& d = root_["defaults"];
      if (!d.is_object()) {
        problems_.add("defaults", "expected an object with \"precompute\" and/or \"probe\"");
      } else {
        for (const auto& [key, value] : d.items()) {
          if (key == "precompute" && value.is_object()) defaults_pre = value;
          else if (key == "probe" && value.is_object()) defaults_probe = value;
          else if (key == "precompute" || key == "probe") problems_.add("defaults." + key, "expected an object");
          else problems_.add("defaults", unknown_key(key, {"precompute", "probe"}));
        }
      }
    }
  }

  // "executor": "local", or {"type": "slurm", "partition", "time", "cpus_per_task", "gpus_per_task",
  // "mem", "max_parallel", "sbatch_args": [...]}.
  void parse_executor(const Json& e) {
    if (e.is_string() && e.get<std::string>() == "local") return;
    if (e.is_string() && e.get<std::string>() == "slurm") {
      study_.executor.kind = Executor::Kind::kSlurm;
      return;
    }
    if (!e.is_object() || !e.contains("type") || !e["type"].is_string() ||
        (e["type"] != "slurm" && e["type"] != "local")) {
      problems_.add("executor", "expected \"local\", \"slurm\" or {\"type\": \"slurm\", \"partition\": ..., ...}, got " + describe(e));
      return;
    }
    if (e["type"] == "local") return;
    study_.executor.kind = Executor::Kind::kSlurm;
    for (const auto& [key, value] : e.items()) {
      if (key != "type") parse_slurm_setting(key, value, study_.executor.slurm);
    }
  }

  // One key of an executor object but "type", into the setting it names.
  void parse_slurm_setting(const std::string& key, const Json& value, SlurmSettings& s) {
    static const std::map<std::string, std::string SlurmSettings::*> texts{
        {"partition", &SlurmSettings::partition}, {"time", &SlurmSettings::time}, {"mem", &SlurmSettings::mem}};
    static const std::map<std::string, std::int64_t SlurmSettings::*> counts{
        {"cpus_per_task", &SlurmSettings::cpus_per_task},
        {"gpus_per_task", &SlurmSettings::gpus_per_task},
        {"max_parallel", &SlurmSettings::max_parallel}};
    const std::string at = "executor." + key;
    if (const auto text = texts.find(key); text != texts.end()) {
      if (!value.is_string() || value.get<std::string>().empty()) {
        problems_.add(at, "expected a string as sbatch takes it (e.g. \"gpu\", \"02:00:00\", \"32G\")");
      } else {
        s.*(text->second) = value.get<std::string>();
      }
    } else if (const auto count = counts.find(key); count != counts.end()) {
      if (!value.is_number_integer() || value.get<std::int64_t>() < 0) {
        problems_.add(at, "expected a whole number >= 0, got " + describe(value));
      } else {
        s.*(count->second) = value.get<std::int64_t>();
      }
    } else if (key == "sbatch_args") {
      if (!value.is_array() || !std::all_of(value.begin(), value.end(), [](const Json& v) { return v.is_string(); })) {
        problems_.add(at, "expected a list of strings, e.g. [\"--account=proj\", \"--qos=high\"]");
      } else {
        s.sbatch_args = value.get<std::vector<std::string>>();
      }
    } else {
      std::vector<std::string> known{"type", "sbatch_args"};
      for (const auto& text : texts) known.push_back(text.first);
      for (const auto& count : counts) known.push_back(count.first);
      problems_.add("executor", unknown_key(key, known));
    }
  }

  std::string check_name(const Json& entry, const std::string& where) {
    if (!entry.contains("name") || !entry["name"].is_string() || entry["name"].get<std::string>().empty()) {
      problems_.add(where + ".name", "missing; every entry needs a unique name");
      return "";
    }
    const std::string name = entry["name"].get<std::string>();
    if (name.find_first_of("/\\") != std::string::npos || name == "." || name == "..") {
      problems_.add(where + ".name", "\"" + name + "\" must not be . or .. nor contain / or \\: it names a folder");
    }
    if (!names_.insert(name).second) problems_.add(where + ".name", "duplicate name \"" + name + "\"; names must be unique");
    return name;
  }

  // The option checks speak in command-line flags ("--crop-size: expected ..."); a config names
  // its fields ("precompute[0].crop_size: expected ..."), from the option a UsageError is about.
  // `run` names the grid point of a probe entry (" (lr=0.1)"), or is empty.
  template <class Options>
  void add_option_problem(const std::string& where, const std::string& run,
                          const std::vector<OptionField<Options>>& fields, const Error& error) {
    if (const auto* usage = dynamic_cast<const UsageError*>(&error)) {
      for (const auto& field : fields) {
        if (field.name != usage->option()) continue;
        problems_.add(where + "." + field.json_key() + run, usage->detail());
        return;
      }
    }
    problems_.add(where + run, error.what());
  }

  void parse_precompute(const std::string& where, const Json& raw) {
    const std::size_t problems_before = problems_.lines.size();
    PrecomputeEntry entry;
    entry.name = check_name(raw, where);
    const Json e = merged(defaults_pre, raw);
    for (const auto& [key, value] : e.items()) {
      if (key == "name") continue;
      parse_precompute_value((raw.contains(key) ? where : "defaults.precompute") + "." + key, key, value, entry);
    }
    entry.options.quiet = false;
    check_precompute_files(where, e, entry);
    if (entry.options.out.empty() && !entry.name.empty() && !study_.output_dir.empty()) {
      entry.options.out = study_.output_dir + "/caches/" + entry.name + ".h5";
    }
    if (!entry.options.out.empty()) {
      // Two entries into one cache: the second would be refused (another signature) or would
      // extend the first's cache, after the first had run. (A duplicate name, which shares the
      // default path, is reported already.)
      const std::string key = fs::absolute(entry.options.out).lexically_normal().string();
      const auto [it, fresh] = cache_owner.try_emplace(key, where);
      if (!fresh && problems_.lines.size() == problems_before) {
        problems_.add(where + ".out", entry.options.out + " is also " + it->second + "'s cache; give each entry its own");
      }
    }
    if (problems_.lines.size() == problems_before && !entry.options.out.empty()) {
      try {
        entry.plan = plan_precompute(entry.options);
      } catch (const Error& err) {
        add_option_problem(where, "", precompute_fields(), err);
      }
    }
    entry_identity[entry.name] = precompute_identity(entry.options).dump();
    entry_index[entry.name] = study_.precomputes.size();
    study_.precomputes.push_back(std::move(entry));
  }

  // One key of a precompute entry (its own, or from defaults.precompute), reported at `at`.
  void parse_precompute_value(const std::string& at, const std::string& key, const Json& value, PrecomputeEntry& entry) {
    const auto& fields = precompute_fields();
    if (key == "shards") {  // not an option of precompute: how the study splits it (docs/scale-out.md)
      if (!value.is_number_integer() || value.get<std::int64_t>() < 1 || value.get<std::int64_t>() > kMaxShards) {
        problems_.add(at, "expected a whole number from 1 to " + std::to_string(kMaxShards) +
                              " (tasks of its job array), got " + describe(value));
      } else {
        entry.shards = value.get<std::int64_t>();
      }
      return;
    }
    const auto* field = find_field(fields, key);
    if (!field) {
      problems_.add(at, unknown_key(key, json_keys(fields, {"name", "shards"})));
      return;
    }
    if (is_grid_value(*field, value)) {
      problems_.add(at, "a list here would mean several caches; write one precompute entry per cache");
      return;
    }
    if (assign(*field, value, entry.options, at, problems_) && field->path) {
      std::string& p = entry.options.*std::get<std::string PrecomputeOptions::*>(field->member);
      p = absolute(base_, p);
    }
  }

  // The encoder and the dataset are given (in the entry or its defaults, `merged`) and exist.
  void check_precompute_files(const std::string& where, const Json& merged, const PrecomputeEntry& entry) {
    for (const char* required : {"encoder", "dataset"}) {
      if (!merged.contains(required)) problems_.add(where + "." + required, "missing");
    }
    if (!entry.options.encoder.empty() && !fs::is_regular_file(entry.options.encoder)) {
      problems_.add(where + ".encoder", entry.options.encoder + " does not exist");
    }
    if (!entry.options.dataset.empty() && !fs::exists(entry.options.dataset)) {
      problems_.add(where + ".dataset", entry.options.dataset + " does not exist");
    }
  }

  // What the cache's content depends on: the options a study's run ids are made from.
  static Json precompute_identity(const PrecomputeOptions& options) {
    Json identity = Json::object();
    for (const auto& field : precompute_fields()) {
      // Options that do not change what is stored; drop-behind came after studies had run ids.
      if (!field.in_json || field.name == "summary-json" || field.name == "drop-behind") continue;
      if (field.identity_when_set && at_default(field, options)) continue;
      std::visit([&](auto m) { identity[field.json_key()] = options.*m; }, field.member);
    }
    return identity;
  }

  // A grid axis of a probe entry: fields that vary together (one, or the "zip" fields).
  struct Axis {
    std::vector<std::string> keys;
    std::size_t size = 0;
  };

  // The entry's "zip" list: field names of the entry.
  std::vector<std::string> zip_keys(const std::string& where, const Json& e) {
    std::vector<std::string> zip;
    if (!e.contains("zip")) return zip;
    if (!e["zip"].is_array()) {
      problems_.add(where + ".zip", "expected a list of field names");
      return zip;
    }
    for (const auto& z : e["zip"]) {
      if (!z.is_string() || !e.contains(z.get<std::string>())) {
        problems_.add(where + ".zip", "names " + describe(z) + ", which is not a field of this entry");
      } else {
        zip.push_back(z.get<std::string>());
      }
    }
    return zip;
  }

  // Axes: fields whose value is a grid, in the entry's key order; "zip" ties some together.
  std::vector<Axis> grid_axes(const std::string& where, const Json& raw, const Json& e, const std::vector<std::string>& zip) {
    const auto& fields = probe_fields();
    std::vector<Axis> axes;
    Axis zipped;
    for (const auto& [key, value] : e.items()) {
      if (key == "name" || key == "zip") continue;
      const std::string at = (raw.contains(key) ? where : "defaults.probe") + "." + key;
      const auto* field = find_field(fields, key);
      if (key != "cache" && !field) {
        problems_.add(at, unknown_key(key, json_keys(fields, {"name", "cache", "zip"})));
        continue;
      }
      const bool grid = key == "cache" ? value.is_array() : is_grid_value(*field, value);
      const bool in_zip = std::find(zip.begin(), zip.end(), key) != zip.end();
      if (in_zip && !grid) {
        problems_.add(at, "is in \"zip\" but is not a list of values");
        continue;
      }
      if (!grid) continue;
      if (value.empty()) {
        problems_.add(at, "empty list: no runs");
        continue;
      }
      if (!in_zip) {
        axes.push_back({{key}, value.size()});
        continue;
      }
      if (zipped.size && zipped.size != value.size()) {
        problems_.add(at, "has " + std::to_string(value.size()) + " values but the other \"zip\" fields have " +
                             std::to_string(zipped.size) + "; zipped fields vary together and need equal lengths");
      }
      zipped.keys.push_back(key);
      zipped.size = value.size();
    }
    if (!zipped.keys.empty()) axes.push_back(zipped);
    return axes;
  }

  // Cache references, checked for every listed value before any run is built.
  void check_cache_refs(const std::string& where, const Json& raw, const Json& e) {
    if (!e.contains("cache")) return;
    const Json caches = e["cache"].is_array() ? e["cache"] : Json::array({e["cache"]});
    for (std::size_t k = 0; k < caches.size(); ++k) {
      const std::string at = (raw.contains("cache") ? where : "defaults.probe") + ".cache" +
                             (e["cache"].is_array() ? "[" + std::to_string(k) + "]" : "");
      if (!caches[k].is_string()) {
        problems_.add(at, "expected a precompute entry name or a path, got " + describe(caches[k]));
        continue;
      }
      const std::string ref = caches[k].get<std::string>();
      if (entry_index.count(ref) || fs::is_regular_file(absolute(base_, ref))) continue;
      std::string entries;
      for (const auto& p : study_.precomputes) entries += (entries.empty() ? "" : ", ") + p.name;
      problems_.add(at, "\"" + ref + "\" is neither a precompute entry (" +
                           (entries.empty() ? "there are none" : "entries: " + entries) + ") nor an existing cache file");
    }
  }

  // One point of the grid: each axis picks one index.
  struct GridPoint {
    Json values;            // the entry with every grid field replaced by its picked value
    Json varying = Json::object();
    std::string label;      // "lr=0.1,levels=2"
    std::string positions;  // " (lr[1], levels[0])", for messages
  };
  GridPoint grid_point(const Json& e, const std::vector<Axis>& axes, std::size_t r) const {
    GridPoint point;
    point.values = e;
    point.values.erase("name");
    point.values.erase("zip");
    std::vector<std::size_t> picks(axes.size());
    for (std::size_t a = axes.size(); a-- > 0;) {
      picks[a] = r % axes[a].size;
      r /= axes[a].size;
    }
    for (std::size_t a = 0; a < axes.size(); ++a) {
      for (const auto& key : axes[a].keys) {
        point.positions += (point.positions.empty() ? " (" : ", ") + key + "[" + std::to_string(picks[a]) + "]";
        const Json picked = e[key][picks[a]];
        point.values[key] = picked;
        point.varying[key] = picked;
        point.label += (point.label.empty() ? "" : ",") + key + "=" + value_label(picked);
      }
    }
    if (!point.positions.empty()) point.positions += ")";
    return point;
  }

  // Builds the run of one grid point; false (with the problem recorded) when it cannot be built.
  bool add_probe_run(const std::string& where, const Json& raw, const Json& e, const std::string& group,
                     const GridPoint& point) {
    const auto& fields = probe_fields();
    ProbeRun run;
    run.group = group;
    run.varying = nlohmann::json::parse(point.varying.dump());
    run.name = group + (point.label.empty() ? "" : "/" + point.label);
    bool ok = true;
    for (const auto& [key, value] : point.values.items()) {
      if (key == "cache") continue;
      std::string at = (raw.contains(key) ? where : "defaults.probe") + "." + key;
      if (run.varying.contains(key)) {  // name the list element in errors
        for (std::size_t k = 0; k < e[key].size(); ++k) {
          if (e[key][k] == value) {
            at += "[" + std::to_string(k) + "]";
            break;
          }
        }
      }
      ok = assign(*find_field(fields, key), value, run.options, at, problems_) && ok;
    }
    // The cache: a precompute entry, or a file (both checked before).
    std::string cache_identity;
    const std::string ref = point.values["cache"].get<std::string>();
    if (entry_index.count(ref)) {
      run.cache_entry = ref;
      run.options.caches = {study_.precomputes[entry_index[ref]].options.out};
      cache_identity = entry_identity[ref];
    } else {
      run.options.caches = {absolute(base_, ref)};
      cache_identity = run.options.caches.front();
    }
    if (!ok) return false;  // one report per entry is enough; the same mistake repeats in every run
    try {
      run.plan = plan_probe(run.options);
    } catch (const Error& err) {
      add_option_problem(where, point.label.empty() ? "" : " (" + point.label + ")", fields, err);
      return false;
    }
    if (run.plan.grid.size() != 1) {  // only logreg's C "auto" makes one run of several combinations
      problems_.add(where + ".C", "a study lists logreg's C values (each is a run and they share one pass), e.g. "
                    "\"C\": [0.01, 0.1, 1, 10]; \"auto\" is the command line's 11 values");
      return false;
    }
    nlohmann::json identity = resolved_options_json(run.plan);
    identity.erase("out");
    identity.erase("quiet");
    for (const auto& field : probe_fields()) {
      if (field.identity_when_set && at_default(field, run.options)) identity.erase(field.json_key());
    }
    identity["cache_identity"] = cache_identity;
    run.id = sha256_hex(identity.dump()).substr(0, 12);
    // A repeated grid value ([1e-3, 0.001]) or a copied entry would train one probe twice into
    // one run directory and list it twice in the results.
    const auto [first, fresh] = run_where_.emplace(run.id, where + " " + run.name + point.positions);
    if (!fresh) {
      problems_.add(where, run.name + point.positions + " is the same run as " + first->second +
                               " (same options on the same cache); remove the repeated value or entry");
      return false;
    }
    run.options.quiet = true;
    run.options.out = study_.output_dir + "/runs/" + slug(group) + "/" + (point.label.empty() ? "run" : slug(point.label)) +
                      "-" + run.id;
    run.plan.options = run.options;
    study_.runs.push_back(std::move(run));
    return true;
  }

  // One probe entry: its grid axes, then one ProbeRun per point of the grid.
  // "seeds": [0, 1, 2] is "seed": [0, 1, 2] (a run per seed; the results summarise over them).
  Json seeds_as_seed(const std::string& where, const Json& entry) {
    Json e = entry;
    if (!e.is_object() || !e.contains("seeds")) return e;
    if (e.contains("seed")) problems_.add(where + ".seeds", "give \"seed\" or \"seeds\", not both");
    else if (!e["seeds"].is_array()) problems_.add(where + ".seeds", "expected a list of seeds, e.g. [0, 1, 2]");
    else e["seed"] = e["seeds"];
    e.erase("seeds");
    return e;
  }

  void parse_probe(const std::string& where, const Json& raw_entry) {
    const std::string group = check_name(raw_entry, where);
    const Json raw = seeds_as_seed(where, raw_entry);
    const Json e = merged(seeds_as_seed("defaults.probe", defaults_probe), raw);
    const std::size_t problems_before = problems_.lines.size();
    const std::vector<std::string> zip = zip_keys(where, e);
    if (!e.contains("cache")) problems_.add(where + ".cache", "missing; name a precompute entry or a cache file");
    for (const char* required : {"task", "levels"}) {
      if (!e.contains(required)) problems_.add(where + "." + required, "missing");
    }
    const std::vector<Axis> axes = grid_axes(where, raw, e, zip);
    check_cache_refs(where, raw, e);
    if (problems_.lines.size() > problems_before) return;

    constexpr std::size_t kMaxRuns = 100000;
    std::size_t total = 1;
    // Capped as it grows: thirty lists of five values would wrap a 64-bit product to a small one.
    for (const auto& a : axes) total = std::min(total, kMaxRuns + 1) * a.size;
    if (total > kMaxRuns) {
      problems_.add(where, "expands into more than " + std::to_string(kMaxRuns) +
                               " runs; that is surely a mistake (each list of values multiplies the runs)");
      return;
    }
    study_.groups.push_back(group);
    for (std::size_t r = 0; r < total; ++r) {
      if (!add_probe_run(where, raw, e, group, grid_point(e, axes, r))) break;
    }
  }

  void report() {
    if (study_.precomputes.empty() && study_.runs.empty() && problems_.lines.empty()) {
      problems_.add("", "nothing to run: add \"precompute\" or \"probes\" entries");
    }
    if (problems_.lines.size() == 1) throw InputError(problems_.lines.front());
    if (!problems_.lines.empty()) {
      std::string message = std::to_string(problems_.lines.size()) + " problem" + (problems_.lines.size() == 1 ? "" : "s") +
                            " in " + path_ + "; nothing was run";
      for (const auto& line : problems_.lines) message += "\n  " + line;
      throw InputError(message);
    }
  }

  Problems problems_;
  std::string path_;
  Json root_;
  Study study_;
  fs::path base_;
  Json defaults_pre = Json::object(), defaults_probe = Json::object();
  std::set<std::string> names_;
  std::map<std::string, std::size_t> entry_index;
  std::map<std::string, std::string> cache_owner;  // absolute cache path -> the entry writing it
  std::map<std::string, std::string> entry_identity;  // name -> JSON of its resolved options
  std::map<std::string, std::string> run_where_;      // run id -> "probes[i] NAME" of its first run
};

}  // namespace

Study load_study(const std::string& path) { return StudyParser(path).parse(); }

}  // namespace embcache
