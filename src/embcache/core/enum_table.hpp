// One table per enum of option values: the text of each value, so that parsing it, naming it
// (in outputs and run ids) and listing the choices (in --help and in errors) come from one place.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "embcache/core/error.hpp"

namespace embcache {

template <class E>
class EnumTable {
 public:
  struct Entry {
    E value;
    const char* name;
  };
  EnumTable(std::initializer_list<Entry> entries) : entries_(entries) {}

  std::optional<E> find(const std::string& text) const {
    for (const auto& e : entries_) {
      if (text == e.name) return e.value;
    }
    return std::nullopt;
  }
  // The value `text` names; a UsageError about `option` that lists the choices otherwise.
  E parse(const std::string& text, const OptionName& option) const {
    if (const auto value = find(text)) return *value;
    throw UsageError(option, "expected " + choices() + ", got \"" + text + "\"");
  }
  const char* name(E value) const {
    for (const auto& e : entries_) {
      if (e.value == value) return e.name;
    }
    return "?";
  }
  // "a, b or c", in the table's order.
  std::string choices() const {
    std::string text;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      text += i == 0 ? "" : i + 1 == entries_.size() ? " or " : ", ";
      text += entries_[i].name;
    }
    return text;
  }

 private:
  std::vector<Entry> entries_;
};

}  // namespace embcache
