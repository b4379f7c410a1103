// Binds OptionField tables to CLI11 subcommands (the JSON side lives in batch/study_config).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <type_traits>
#include <vector>

#include "embcache/core/option_field.hpp"

namespace embcache {

template <class T>
void add_option_fields(CLI::App* sub, const std::shared_ptr<T>& options, const std::vector<OptionField<T>>& fields) {
  for (const auto& field : fields) {
    const std::string flag = "--" + field.name;
    std::visit(
        [&](auto member) {
          auto& value = (*options).*member;
          using V = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<V, bool>) {
            if (field.negated) {  // CLI11's "!--flag" would show as "--flag{false}" in --help
              sub->add_flag_callback(flag, [options, member] { (*options).*member = false; }, field.help);
            } else {
              sub->add_flag(flag, value, field.help);
            }
          } else {
            CLI::Option* option = sub->add_option(flag, value, field.help);
            if (field.required) option->required();
            if (field.show_default && !field.required) option->capture_default_str();
          }
        },
        field.member);
  }
}

}  // namespace embcache
