// The grid of crops cut from a window, exactly as rslearn's all-crops mode places them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "embcache/core/crop_key.hpp"

namespace embcache {

struct CropGridSpec {
  // Crop width and height; empty = one crop covering the whole window.
  std::optional<std::int64_t> width, height;
  std::int64_t overlap = 0;
  void validate() const;  // throws UsageError (overlap must be smaller than the crop)
};

// rslearn's rule: the first crop starts at the window origin; further crops every (size - overlap)
// pixels while they end before the window edge; a last crop snapped to end at the edge when the
// window is larger than one crop. A window smaller than the crop gets one crop at its origin that
// extends past its edge (the caller pads). Order matches rslearn: x outer, y inner.
std::vector<Bounds> crop_grid(const Bounds& window, const CropGridSpec& spec);

}  // namespace embcache
