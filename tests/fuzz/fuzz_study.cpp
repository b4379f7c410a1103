// Fuzz target: a study file (`embcache run CONFIG.json`), parsed and validated as `embcache run`
// does before it runs anything (batch/study_config.hpp). Any input must end in a Study or an
// embcache::Error (the one-line messages a user sees); another exception, a crash, a hang or
// unbounded memory is a finding. The file sits in a folder with an encoder and a dataset file,
// so entries that name them get past the existence checks into grids and plans.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "embcache/batch/study_config.hpp"
#include "embcache/core/error.hpp"

namespace {

// A folder of this process's with an encoder and a dataset file, removed when the process ends.
struct Sandbox {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("embcache-fuzz-study-" + std::to_string(::getpid()));
  Sandbox() {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "enc.pt") << "x";
    std::ofstream(dir / "data.h5") << "x";
  }
  ~Sandbox() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Sandbox sandbox;
  const std::string path = (sandbox.dir / "study.json").string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  try {
    embcache::load_study(path);
  } catch (const embcache::Error&) {
  }
  return 0;
}
