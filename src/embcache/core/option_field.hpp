// One description per command option, shared by the command line (CLI11) and JSON configs, so
// the two can never disagree on names, types or meaning.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace embcache {

template <class T>
struct OptionField {
  using Member = std::variant<std::string T::*, std::vector<std::string> T::*, double T::*, std::int64_t T::*,
                              int T::*, std::uint64_t T::*, bool T::*>;
  enum class Shape {
    kScalar,     // one value
    kList,       // a comma list on the command line, a JSON array of scalars in configs
    kLevelSets,  // probe levels: "1+2,3" on the command line; [1, 2] or [[1, 2], [3]] in configs
  };
  std::string name;  // the long option without dashes: "weight-decay" (JSON: "weight_decay")
  std::string help;
  Member member;
  Shape shape = Shape::kScalar;
  bool required = false;    // on the command line
  bool negated = false;     // a bool flag that sets the member to false: --no-fsync
  bool grid = false;        // a comma list means several runs (train-probe's multi-head grid)
  bool path = false;        // JSON configs resolve it relative to the config file
  bool numeric = false;     // text that holds numbers (lr "1e-3,1e-2"): JSON must give numbers
  bool in_json = true;      // false: set by `embcache run` itself (outputs, progress)
  bool show_default = true;
  // Came after studies had run ids: enters a run's identity only when set to something other
  // than its default, so that finished runs keep their ids (docs/run.md).
  bool identity_when_set = false;

  std::string json_key() const {
    std::string key = name;
    for (auto& c : key) c = c == '-' ? '_' : c;
    return key;
  }
};

// Whether `field` of `options` holds its default value (that of a default-constructed T).
template <class T>
bool at_default(const OptionField<T>& field, const T& options) {
  static const T defaults{};
  return std::visit([&](auto member) { return options.*member == defaults.*member; }, field.member);
}

// Builds a field table in --help order: t.add(...) returns the new field for its flags.
template <class T>
class OptionTable {
 public:
  OptionField<T>& add(const char* name, std::string help, typename OptionField<T>::Member member) {
    fields_.push_back(OptionField<T>{name, std::move(help), member});
    return fields_.back();
  }
  OptionField<T>& last() { return fields_.back(); }
  std::vector<OptionField<T>> take() { return std::move(fields_); }

 private:
  std::vector<OptionField<T>> fields_;
};

}  // namespace embcache
