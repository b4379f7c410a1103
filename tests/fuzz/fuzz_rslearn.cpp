// Fuzz target: an rslearn dataset's JSON files, listed and validated as precompute does before it
// reads a raster (dataset/rslearn_windows.hpp). The input holds up to four texts separated by a
// line "---": config.json (empty: none), two windows' metadata.json (the second defaults to the first),
// and the windows' GeoJSON label layer (layers/label/data.geojson). Any input must end in a
// listing or an embcache::Error; another exception, a crash, a hang or unbounded memory is a
// finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "embcache/core/error.hpp"
#include "embcache/dataset/rslearn_windows.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_texts(const std::string& input) {
  std::vector<std::string> texts;
  std::size_t start = 0;
  while (texts.size() < 3) {
    const std::size_t at = input.find("\n---\n", start);
    if (at == std::string::npos) break;
    texts.push_back(input.substr(start, at - start));
    start = at + 5;
  }
  texts.push_back(input.substr(start));
  return texts;
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// The dataset's folder, this process's, removed when the process ends.
struct Sandbox {
  fs::path dir = fs::temp_directory_path() / ("embcache-fuzz-rslearn-" + std::to_string(::getpid()));
  ~Sandbox() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> texts = split_texts(std::string(reinterpret_cast<const char*>(data), size));
  static const Sandbox sandbox;
  const fs::path& root = sandbox.dir;
  std::error_code ec;
  fs::remove_all(root, ec);
  if (!texts[0].empty()) write(root / "config.json", texts[0]);  // none: band sets from folder names
  for (const char* name : {"w0", "w1"}) {
    const fs::path window = root / "windows" / "default" / name;
    const std::size_t meta = name[1] == '0' ? 1 : 2;
    write(window / "metadata.json", texts.size() > meta ? texts[meta] : texts.size() > 1 ? texts[1] : "{}");
    write(window / "layers" / "sentinel2" / "R_G_B" / "geotiff.tif", "");
    write(window / "layers" / "sentinel2" / "completed", "");
    write(window / "layers" / "label" / "completed", "");
    if (texts.size() > 3) write(window / "layers" / "label" / "data.geojson", texts[3]);
  }
  embcache::RslearnOptions options;
  options.root = root.string();
  options.layers = "sentinel2:R,G,B";
  options.label_layer = "label";
  options.label_property = "category";
  options.reader_threads = 0;
  try {
    embcache::list_rslearn_windows(options);
  } catch (const embcache::Error&) {
  }
  return 0;
}
