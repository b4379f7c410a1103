// Small file helpers: atomic replacement of result files.
#pragma once

#include <string>

namespace embcache {

// Writes `text` to `path` through a file beside it of this process and thread, then a rename,
// so readers never see half a file, and concurrent writers of one path never mix theirs.
// `what` names the option or output in the IoError.
void write_text_atomically(const std::string& path, const std::string& text, const std::string& what);

}  // namespace embcache
