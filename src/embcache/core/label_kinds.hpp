// Which labels a dataset carries: what the dataset readers report, the store records in a cache,
// and train-probe checks against its task. (Its JSON form is the cache schema's: store/cache_schema.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace embcache {

// Which labels a dataset carries; every window of one dataset has the same kinds.
struct LabelKinds {
  bool has_class = false;
  bool has_value = false;
  std::int64_t value_width = 0;  // 0: one scalar per window ([N]); K: a vector ([N, K])
  bool has_mask = false;
  std::int64_t ignore_index = -1;
  std::vector<std::string> class_names;  // class id -> name, when the dataset names its classes
  bool has_pixel_value = false;           // a float32 target per pixel (NaN: no value)
};

}  // namespace embcache
