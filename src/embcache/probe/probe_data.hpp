// The data side of a probe run: the caches (checked to agree), the task's labels, and the rows of
// each split. Features themselves are fed by FeatureFeed.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "embcache/core/enum_table.hpp"
#include "embcache/probe/probe_options.hpp"
#include "embcache/probe/train_fraction.hpp"
#include "embcache/store/cache_reader.hpp"

namespace embcache {

enum class ProbeTask { kClassification, kMultilabel, kSegmentation, kRegression, kPixelRegression };
const EnumTable<ProbeTask>& probe_tasks();
const char* task_name(ProbeTask task);  // probe_tasks()'s name
bool is_dense(ProbeTask task);  // segmentation and pixel-regression predict a value per pixel

// What ProbeData checks of its caches before reading a row: their signatures agree, and the
// first carries the labels `task` needs. InputError otherwise.
void check_caches_for_task(const std::vector<std::unique_ptr<CacheReader>>& caches, ProbeTask task);
// Resolves a level of `cache` by name, or by encoder output index (a name wins); UsageError
// listing the levels otherwise.
const LevelSpec& find_level(const CacheReader& cache, const std::string& name_or_index);

// The rows of one split, ordered by (cache, row).
struct SplitRows {
  std::string name;
  std::vector<std::vector<std::int64_t>> rows;  // per cache, ascending
  std::int64_t size() const;
};

class ProbeData {
 public:
  // Opens the caches, checks that their signatures agree and that they carry the labels `task`
  // needs, selects the splits and loads the (small) image-level targets. `window_keys`: also
  // keep a hash of each train row's window (for train_row_keys).
  ProbeData(const ProbeOptions& options, ProbeTask task, bool window_keys = false);
  ~ProbeData();

  ProbeTask task() const { return task_; }
  const std::vector<std::unique_ptr<CacheReader>>& caches() const { return caches_; }
  // find_level on the first cache.
  const LevelSpec& level(const std::string& name_or_index) const;
  const std::vector<LevelSpec>& levels() const { return caches_.front()->levels(); }

  const SplitRows& train() const { return splits_[0]; }
  const SplitRows& val() const { return splits_[1]; }
  const SplitRows& test() const { return splits_[2]; }  // may be empty
  // One line per cache an interrupted precompute left short (see cache_shortfall).
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Image-level targets of a split (classification: int64 [n]; multilabel/regression: float32
  // [n] or [n, K]); undefined for dense tasks, whose targets are the masks.
  const at::Tensor& targets(int split) const { return targets_[split]; }

  // What --train-fraction draws its subsets from (built with window_keys): each train row's
  // window, and its class for classification.
  TrainRowKeys train_row_keys() const;

  std::int64_t num_outputs() const { return num_outputs_; }  // classes, or regression width
  std::int64_t ignore_index() const { return ignore_index_; }
  std::vector<std::int64_t> mask_shape() const { return mask_shape_; }  // {h, w} for dense tasks
  // pixel-regression targets come from /labels/pixel_value (float, NaN = none) rather than the mask.
  bool pixel_values() const { return pixel_values_; }

 private:
  void load_targets(const ProbeOptions& options);
  at::Tensor gather_targets(const SplitRows& split, const std::vector<at::Tensor>& per_cache) const;
  void check_mask_classes(const ProbeOptions& options);

  ProbeTask task_;
  std::vector<std::unique_ptr<CacheReader>> caches_;
  SplitRows splits_[3];
  std::vector<std::uint64_t> train_windows_;  // with window_keys: per train row, in split order
  std::vector<std::string> warnings_;
  at::Tensor targets_[3];
  std::int64_t num_outputs_ = 0;
  std::int64_t ignore_index_ = -1;
  std::vector<std::int64_t> mask_shape_;
  bool pixel_values_ = false;
};

}  // namespace embcache
