#include "embcache/core/parse.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <sstream>


namespace embcache {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::vector<std::string> split_list(const std::string& text, const OptionName& option) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) throw UsageError(option, "empty item in list \"" + text + "\"");
    items.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

double parse_double(const std::string& text, const OptionName& option) {
  const std::string t = trim(text);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || !std::isfinite(v)) {
    throw UsageError(option, "expected a number, got \"" + text + "\"");
  }
  return v;
}

std::int64_t parse_int(const std::string& text, const OptionName& option) {
  const std::string t = trim(text);
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0') throw UsageError(option, "expected an integer, got \"" + text + "\"");
  return v;
}

std::vector<double> parse_double_list(const std::string& text, const OptionName& option) {
  std::vector<double> values;
  for (const auto& item : split_list(text, option)) values.push_back(parse_double(item, option));
  return values;
}

std::vector<std::int64_t> parse_int_list(const std::string& text, const OptionName& option) {
  std::vector<std::int64_t> values;
  for (const auto& item : split_list(text, option)) values.push_back(parse_int(item, option));
  return values;
}

std::pair<std::int64_t, std::int64_t> parse_size(const std::string& text, const OptionName& option) {
  const auto x = text.find_first_of("xX");
  const std::string expected = "expected S or WxH (64 or 64x32), got \"" + text + "\"";
  auto side = [&](const std::string& part) {
    const std::string t = trim(part);
    char* end = nullptr;
    const long long v = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0') throw UsageError(option, expected);
    return std::int64_t(v);
  };
  std::int64_t w, h;
  if (x == std::string::npos) {
    w = h = side(text);
  } else {
    w = side(text.substr(0, x));
    h = side(text.substr(x + 1));
  }
  if (w <= 0 || h <= 0) throw UsageError(option, "sizes must be positive, got \"" + text + "\"");
  return {w, h};
}

std::int64_t parse_bytes(const std::string& text, const OptionName& option) {
  std::string t = trim(text);
  double unit = 1.0;
  for (const std::string suffix : {"iB", "B", "b"}) {
    if (t.size() > suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0) {
      t.resize(t.size() - suffix.size());
      break;
    }
  }
  if (!t.empty()) {
    const std::string units = "KMGT";
    const auto u = units.find(char(std::toupper(static_cast<unsigned char>(t.back()))));
    if (u != std::string::npos) {
      unit = std::pow(1024.0, double(u + 1));
      t.pop_back();
    }
  }
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || !std::isfinite(v) || v <= 0) {
    throw UsageError(option, "expected a size such as 512M or 8G, got \"" + text + "\"");
  }
  return std::int64_t(v * unit);
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string format_number(double value) {
  std::ostringstream s;
  s << std::setprecision(6) << value;
  return s.str();
}

std::string exact_number_text(double value) {
  std::string text = format_number(value);
  for (int digits = 7; digits <= 17 && std::strtod(text.c_str(), nullptr) != value; ++digits) {
    std::ostringstream s;
    s << std::setprecision(digits) << value;
    text = s.str();
  }
  return text;
}

std::string format_duration(double seconds) {
  const long long s = std::llround(std::max(0.0, seconds));
  char text[32];
  if (s < 60) {
    std::snprintf(text, sizeof text, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  }
  return text;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return buf;
}

}  // namespace embcache
