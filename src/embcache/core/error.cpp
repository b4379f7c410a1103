#include "embcache/core/error.hpp"

#include <algorithm>

namespace embcache {

std::string first_line(const std::string& text) {
  // TorchScript's compiler errors open with an empty line; the message is the first line with text.
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = std::min(text.find('\n', start), text.size());
    if (text.find_first_not_of(" \t\r", start) < end) return text.substr(start, end - start);
    start = end + 1;
  }
  return "";
}

}  // namespace embcache
