#include "embcache/dataset/crop_grid.hpp"

#include "embcache/core/error.hpp"

namespace embcache {

void CropGridSpec::validate() const {
  if (!width) {
    if (overlap != 0) throw UsageError(OptionName{"overlap"}, "needs --crop-size");
    return;
  }
  if (*width <= 0 || *height <= 0) throw UsageError(OptionName{"crop-size"}, "must be positive");
  if (overlap < 0) throw UsageError(OptionName{"overlap"}, "must be 0 or more");
  if (overlap >= *width || overlap >= *height) {
    throw UsageError(OptionName{"overlap"}, std::to_string(overlap) +
                     " must be smaller than the crop size " + std::to_string(*width) + "x" +
                     std::to_string(*height));
  }
}

namespace {

std::vector<std::int64_t> starts_along(std::int64_t begin, std::int64_t end, std::int64_t size,
                                       std::int64_t overlap) {
  const std::int64_t stride = size - overlap;
  std::vector<std::int64_t> starts{begin};
  for (std::int64_t s = begin + stride; s < end - size; s += stride) starts.push_back(s);
  if (end - size > begin) starts.push_back(end - size);
  return starts;
}

}  // namespace

std::vector<Bounds> crop_grid(const Bounds& window, const CropGridSpec& spec) {
  if (!spec.width) return {window};
  const auto cols = starts_along(window.x1, window.x2, *spec.width, spec.overlap);
  const auto rows = starts_along(window.y1, window.y2, *spec.height, spec.overlap);
  std::vector<Bounds> crops;
  crops.reserve(cols.size() * rows.size());
  for (std::int64_t x : cols) {
    for (std::int64_t y : rows) crops.push_back({x, y, x + *spec.width, y + *spec.height});
  }
  return crops;
}

}  // namespace embcache
