// Parsing of option values shared by the command line and JSON configs (lists, sizes, bytes).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "embcache/core/error.hpp"

namespace embcache {

// Each raises a UsageError about `option` for text that is not of its form.
// "1,2, 3" -> {"1","2","3"}; empty items are an error.
std::vector<std::string> split_list(const std::string& text, const OptionName& option);
std::vector<double> parse_double_list(const std::string& text, const OptionName& option);
std::vector<std::int64_t> parse_int_list(const std::string& text, const OptionName& option);
double parse_double(const std::string& text, const OptionName& option);
std::int64_t parse_int(const std::string& text, const OptionName& option);
// "64" -> (64, 64); "96x64" -> (width 96, height 64).
std::pair<std::int64_t, std::int64_t> parse_size(const std::string& text, const OptionName& option);
// "512M", "8G", "1.5GiB", "1000000" -> bytes (K/M/G/T are powers of 1024).
std::int64_t parse_bytes(const std::string& text, const OptionName& option);
// A CSV field: quoted (with doubled quotes) when it holds a comma, a quote or a newline.
std::string csv_field(const std::string& text);
// A number as a person writes it, for messages: 1.5 -> "1.5", 1e-05 -> "1e-05" (6 significant digits).
std::string format_number(double value);
// A number as text that reads back (strtod) as exactly `value`: format_number's spelling where that
// is exact (0.001 -> "0.001", 2.0 -> "2"), else the fewest significant digits that are
// (1370.19151926 -> "1370.19151926"). Option text made from JSON numbers uses it, so a study keeps
// every digit while the run ids of studies whose numbers were already exact stay as they were.
std::string exact_number_text(double value);
// A duration for progress lines: 42 -> "42s", 725 -> "12m05s", 10980 -> "3h03m".
std::string format_duration(double seconds);
// Human-readable byte count: 1536 -> "1.5 KiB".
std::string format_bytes(double bytes);

}  // namespace embcache
