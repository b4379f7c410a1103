// The dataset reader interface: a list of windows, each read whole (pixels, labels, mask).
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "embcache/core/crop_key.hpp"
#include "embcache/core/label_kinds.hpp"

namespace embcache {

struct WindowInfo {
  std::string group;
  std::string name;
  std::string split;
  Bounds bounds;  // the window's pixel bounds; crops are placed in these coordinates
};

struct WindowData {
  at::Tensor pixels;       // [C, H, W], or [T, C, H, W] with time_steps(), in the dataset's integer or
                           // float type (uint16 widened to int32)
  std::int64_t label_class = 0;
  at::Tensor label_value;  // float32 [] or [K]; undefined without value labels
  at::Tensor mask;         // int32 [H, W]; undefined without masks
  at::Tensor pixel_value;  // float32 [H, W]; undefined without per-pixel values
};

class WindowSource {
 public:
  virtual ~WindowSource() = default;
  virtual const std::vector<WindowInfo>& windows() const = 0;
  virtual std::int64_t channels() const = 0;  // C: bands, per time step
  // T when windows have a time axis (pixels [T, C, H, W]), 0 when they have none.
  virtual std::int64_t time_steps() const { return 0; }
  virtual LabelKinds label_kinds() const = 0;
  // One line saying what this is (path, format, window count), for summaries and inspect.
  virtual std::string describe() const = 0;
  // Reads one window whole. Not thread-safe unless concurrent_reads(): one thread owns the
  // source (HDF5 is not concurrent).
  virtual WindowData read(std::size_t index) = 0;
  // Whether read() may run on several threads at once (then ReadAheadSource can wrap it).
  virtual bool concurrent_reads() const { return false; }
  // Windows left out when the source was opened, with the reason ("layer not completed").
  virtual std::vector<std::pair<std::string, std::int64_t>> skipped() const { return {}; }
  // Informational signature fields (rslearn: the layers and bands read).
  virtual nlohmann::json signature_fields() const { return nlohmann::json::object(); }
};

}  // namespace embcache
