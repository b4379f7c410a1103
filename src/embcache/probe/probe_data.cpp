#include "embcache/probe/probe_data.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "embcache/core/crop_key.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/limits.hpp"
#include "embcache/core/parse.hpp"
#include "embcache/store/cache_store.hpp"

namespace embcache {
namespace {

// The window key's hash: the same window always lands on the same side of a --val-fraction
// carve, whatever the seed, and all crops of a window stay together (no leakage across splits).
std::uint64_t window_hash(const std::string& group, const std::string& window) { return window_key_hash(group, window); }


std::string split_counts_text(const std::map<std::string, std::int64_t>& counts) {
  std::string text;
  for (const auto& [name, n] : counts) text += (text.empty() ? "" : ", ") + name + " (" + std::to_string(n) + ")";
  return text.empty() ? "none" : text;
}

}  // namespace

const EnumTable<ProbeTask>& probe_tasks() {
  static const EnumTable<ProbeTask> table{{ProbeTask::kClassification, "classification"},
                                          {ProbeTask::kMultilabel, "multilabel"},
                                          {ProbeTask::kSegmentation, "segmentation"},
                                          {ProbeTask::kRegression, "regression"},
                                          {ProbeTask::kPixelRegression, "pixel-regression"}};
  return table;
}

const char* task_name(ProbeTask task) { return probe_tasks().name(task); }

bool is_dense(ProbeTask task) {
  return task == ProbeTask::kSegmentation || task == ProbeTask::kPixelRegression;
}

std::int64_t SplitRows::size() const {
  std::int64_t n = 0;
  for (const auto& r : rows) n += std::int64_t(r.size());
  return n;
}

void check_caches_for_task(const std::vector<std::unique_ptr<CacheReader>>& caches, ProbeTask task) {
  const CacheReader& first = *caches.front();
  for (std::size_t i = 1; i < caches.size(); ++i) {
    const auto differences = signature_differences(first.signature(), caches[i]->signature());
    if (!differences.empty()) {
      std::string fields;
      for (const auto& d : differences) fields += (fields.empty() ? "" : ", ") + d;
      throw InputError("--cache " + caches[i]->path() + ": its signature differs from " + first.path() +
                       " in " + fields + "; caches trained on together must come from the same "
                       "encoder, preprocessing and crops");
    }
  }

  const LabelKinds& labels = first.label_kinds();
  const std::string what = "--task " + std::string(task_name(task)) + " needs ";
  if (task == ProbeTask::kClassification && !labels.has_class) {
    throw InputError(first.path() + ": the cache has no class labels (/labels/class); " + what +
                     "them: precompute from a dataset with integer /labels");
  }
  if ((task == ProbeTask::kRegression || task == ProbeTask::kMultilabel) && !labels.has_value) {
    throw InputError(first.path() + ": the cache has no float labels (/labels/value); " + what +
                     "them: precompute from a dataset with float32 /labels");
  }
  if (task == ProbeTask::kMultilabel && labels.value_width == 0) {
    throw InputError(first.path() + ": /labels/value is one number per row; " + what +
                     "a 0/1 vector per row ([N, K] labels)");
  }
  if (task == ProbeTask::kSegmentation && !labels.has_mask) {
    throw InputError(first.path() + ": the cache has no masks (/labels/mask); " + what +
                     "them: precompute from a dataset with /masks (or an rslearn raster label layer)");
  }
  if (task == ProbeTask::kPixelRegression && !labels.has_mask && !labels.has_pixel_value) {
    throw InputError(first.path() + ": the cache has no per-pixel targets (/labels/pixel_value or /labels/mask); " + what +
                     "them: precompute with a raster label layer");
  }
}

ProbeData::~ProbeData() = default;

namespace {

// Each split has one role: a row may train, pick, or be reported on, never two of these.
void check_split_roles(const std::string (&names)[3]) {
  if (names[1] == names[0]) {
    throw UsageError(OptionName{"val-split"}, "'" + names[1] + "' is also the --train-split; the epoch and the combination "
                     "must be picked on rows the heads did not train on: name another split, or carve one "
                     "from train with --val-fraction 0.1");
  }
  for (int s = 0; s < 2; ++s) {
    if (names[2] != names[s]) continue;
    throw UsageError(OptionName{"test-split"}, "'" + names[2] + "' is also the " + (s == 0 ? "--train-split" : "--val-split") +
                     "; test metrics must come from rows that neither trained nor picked the heads: name "
                     "another split (or leave --test-split out if the caches have no 'test')");
  }
}

// Sorts the caches' rows into the three splits (named already), reading each cache's index in
// blocks of rows: memory stays bounded however large the cache. Under a --val-fraction carve,
// train rows of the windows whose key hashes below it go to val.
class SplitAssigner {
 public:
  // `train_windows`: when not null, receives each train row's window hash, in split order.
  SplitAssigner(const std::vector<std::unique_ptr<CacheReader>>& caches, double val_fraction, SplitRows (&splits)[3],
                std::vector<std::uint64_t>* train_windows)
      : caches_(caches), val_fraction_(val_fraction), splits_(splits), train_windows_(train_windows) {}

  void add_cache(std::size_t c) {
    constexpr std::int64_t kIndexBlock = 1 << 16;
    const CacheReader& cache = *caches_[c];
    const bool keys = val_fraction_ > 0 || caches_.size() > 1 || train_windows_ != nullptr;
    for (std::int64_t start = 0; start < cache.rows(); start += kIndexBlock) {
      const std::int64_t n = std::min(kIndexBlock, cache.rows() - start);
      const CacheIndex block = cache.read_index(start, n, {keys, true, false});
      if (caches_.size() > 1) check_distinct_crops(c, block);
      for (std::size_t i = 0; i < block.splits.size(); ++i) add_row(c, start + std::int64_t(i), block, i);
    }
  }

  // Rows per split name, in every cache added.
  const std::map<std::string, std::int64_t>& counts() const { return counts_; }

 private:
  void add_row(std::size_t c, std::int64_t r, const CacheIndex& block, std::size_t i) {
    const std::string& split = block.splits[i];
    ++counts_[split];
    const int s = split == splits_[0].name ? 0 : split == splits_[1].name ? 1 : split == splits_[2].name ? 2 : -1;
    if (s < 0) return;
    if (s != 0) {
      splits_[s].rows[c].push_back(r);
      return;
    }
    const bool hashed = val_fraction_ > 0 || train_windows_ != nullptr;
    const std::uint64_t window = hashed ? window_hash(block.groups[i], block.windows[i]) : 0;
    if (val_fraction_ > 0 && double(window % 1000000) < val_fraction_ * 1e6) {
      splits_[1].rows[c].push_back(r);
    } else {
      splits_[0].rows[c].push_back(r);
      if (train_windows_) train_windows_->push_back(window);
    }
  }

  // Crops trained on together must be distinct: a key in two caches (the same cache given twice,
  // or one dataset cached twice) would count its rows twice, in the metrics too. Within one cache
  // keys are unique. One 64-bit hash per row, only when there are several caches.
  void check_distinct_crops(std::size_t c, const CacheIndex& block) {
    for (std::size_t i = 0; i < block.windows.size(); ++i) {
      const std::int64_t* bounds = &block.bounds[4 * i];
      const auto [it, fresh] = crop_cache_.try_emplace(crop_key_hash(block.groups[i], block.windows[i], bounds), c);
      if (fresh || it->second == c) continue;
      const CropKey crop{block.groups[i], block.windows[i], Bounds{bounds[0], bounds[1], bounds[2], bounds[3]}};
      throw InputError("--cache " + caches_[c]->path() + ": the crop " + crop.describe() +
                       " is also in " + caches_[it->second]->path() + "; caches trained on together must "
                       "hold different crops (is one cache given twice?)");
    }
  }

  const std::vector<std::unique_ptr<CacheReader>>& caches_;
  const double val_fraction_;
  SplitRows (&splits_)[3];
  std::vector<std::uint64_t>* train_windows_;
  std::map<std::string, std::int64_t> counts_;
  std::unordered_map<std::uint64_t, std::size_t> crop_cache_;  // each crop's cache, with several caches
};

// InputError or UsageError when a split the run needs has no rows, or --val-fraction would carve
// into a split the caches already have.
void check_rows_found(const ProbeOptions& options, const SplitRows (&splits)[3],
                      const std::map<std::string, std::int64_t>& counts) {
  if (options.val_fraction > 0 && counts.count(options.val_split)) {
    throw UsageError(OptionName{"val-fraction"}, "the caches already have a '" + options.val_split +
                     "' split; drop --val-fraction, or name another --val-split to carve into");
  }
  if (splits[0].size() == 0) {
    throw InputError("--train-split: no rows in split '" + splits[0].name + "'; the caches' splits are: " +
                     split_counts_text(counts));
  }
  if (splits[1].size() == 0) {
    throw InputError("--val-split: no rows in split '" + splits[1].name + "' (the caches' splits are: " +
                     split_counts_text(counts) + "); name one with --val-split, or carve one from "
                     "train with --val-fraction 0.1");
  }
  // The default test split may be absent (the run reports no test metrics); a named one may not.
  if (splits[2].size() == 0 && splits[2].name != ProbeOptions().test_split) {
    throw InputError("--test-split: no rows in split '" + splits[2].name + "' (the caches' splits are: " +
                     split_counts_text(counts) + "); name one of them, or leave --test-split out");
  }
}

}  // namespace

ProbeData::ProbeData(const ProbeOptions& options, ProbeTask task, bool window_keys) : task_(task) {
  // The options first: a mistake in them is reported before any cache is read.
  if (options.caches.empty()) throw UsageError(OptionName{"cache"}, "at least one cache is needed");
  if (options.val_fraction < 0 || options.val_fraction >= 1) {
    throw UsageError(OptionName{"val-fraction"}, "expected a fraction in [0, 1), got " + format_number(options.val_fraction));
  }
  const std::string names[3] = {options.train_split, options.val_split, options.test_split};
  check_split_roles(names);

  for (const auto& path : options.caches) {
    caches_.push_back(std::make_unique<CacheReader>(path));
    if (std::string shortfall = cache_shortfall(*caches_.back()); !shortfall.empty()) {
      warnings_.push_back(std::move(shortfall) + " (training on the " + std::to_string(caches_.back()->rows()) +
                          " rows it has)");
    }
  }
  check_caches_for_task(caches_, task);
  const CacheReader& first = *caches_.front();
  const LabelKinds& labels = first.label_kinds();
  pixel_values_ = task == ProbeTask::kPixelRegression && labels.has_pixel_value;

  for (int s = 0; s < 3; ++s) {
    splits_[s].name = names[s];
    splits_[s].rows.resize(caches_.size());
  }
  SplitAssigner assigner(caches_, options.val_fraction, splits_, window_keys ? &train_windows_ : nullptr);
  for (std::size_t c = 0; c < caches_.size(); ++c) assigner.add_cache(c);
  check_rows_found(options, splits_, assigner.counts());
  mask_shape_ = pixel_values_ ? first.pixel_value_shape() : first.mask_shape();
  ignore_index_ = options.ignore_index != -1000000 ? options.ignore_index : labels.ignore_index;
  load_targets(options);
}

at::Tensor ProbeData::gather_targets(const SplitRows& split, const std::vector<at::Tensor>& per_cache) const {
  std::vector<at::Tensor> parts;
  for (std::size_t c = 0; c < caches_.size(); ++c) {
    const auto& rows = split.rows[c];
    if (rows.empty()) continue;
    const at::Tensor idx = at::tensor(rows, at::kLong);
    parts.push_back(per_cache[c].index_select(0, idx));
  }
  return parts.empty() ? at::Tensor() : at::cat(parts);
}

void ProbeData::load_targets(const ProbeOptions& options) {
  if (is_dense(task_)) {
    if (task_ == ProbeTask::kSegmentation) {
      check_mask_classes(options);
    } else {
      num_outputs_ = 1;
    }
    return;
  }
  std::vector<at::Tensor> per_cache;
  for (const auto& cache : caches_) {
    // Only the label column: read_rows would also read every feature.
    per_cache.push_back(cache->read_targets(task_ == ProbeTask::kClassification));
  }
  for (int s = 0; s < 3; ++s) targets_[s] = gather_targets(splits_[s], per_cache);

  if (task_ == ProbeTask::kClassification) {
    std::int64_t max_class = 0;
    for (int s = 0; s < 3; ++s) {
      if (targets_[s].defined() && targets_[s].numel() > 0) max_class = std::max(max_class, targets_[s].max().item<std::int64_t>());
    }
    if (max_class >= kMaxClasses) {
      throw InputError(caches_.front()->path() + ": a row has class " + std::to_string(max_class) + "; class ids must be "
                       "from 0 to " + std::to_string(kMaxClasses - 1));
    }
    num_outputs_ = options.num_classes > 0 ? options.num_classes : max_class + 1;
    for (std::size_t c = 0; c < caches_.size(); ++c) {
      const auto* ids = per_cache[c].data_ptr<std::int64_t>();
      for (int s = 0; s < 3; ++s) {
        for (auto r : splits_[s].rows[c]) {
          if (ids[r] >= 0 && ids[r] < num_outputs_) continue;
          const CacheIndex index = caches_[c]->read_index();
          throw InputError(caches_[c]->path() + ": row " + std::to_string(r) + " (" + index.groups[r] + "/" +
                           index.windows[r] + ") has class " + std::to_string(ids[r]) + ", outside [0, " +
                           std::to_string(num_outputs_) + ") set by --num-classes; raise --num-classes");
        }
      }
    }
    if (num_outputs_ < 2) {
      throw InputError(caches_.front()->path() + ": every row has class 0; classification needs at least "
                       "two classes (or pass --num-classes)");
    }
  } else {
    num_outputs_ = targets_[0].size(1);
    if (task_ == ProbeTask::kMultilabel) {
      for (int s = 0; s < 3; ++s) {
        if (!targets_[s].defined()) continue;
        if (!at::logical_or(targets_[s] == 0, targets_[s] == 1).all().item<bool>()) {
          throw InputError(caches_.front()->path() + ": /labels/value holds values other than 0 and 1 in split '" +
                           splits_[s].name + "'; --task multilabel needs 0/1 vectors (use --task regression)");
        }
      }
    } else if (!at::isfinite(targets_[0]).all().item<bool>()) {
      throw InputError(caches_.front()->path() + ": /labels/value holds NaN or Inf in the training split");
    }
  }
}

void ProbeData::check_mask_classes(const ProbeOptions& options) {
  // Masks can be large; scan them in blocks of rows, never all at once.
  std::int64_t max_class = -1;
  for (std::size_t c = 0; c < caches_.size(); ++c) {
    const auto& cache = *caches_[c];
    const std::int64_t block = std::max<std::int64_t>(1, (64 << 20) / std::max<std::int64_t>(1, 4 * mask_shape_[0] * mask_shape_[1]));
    for (std::int64_t start = 0; start < cache.rows(); start += block) {
      const std::int64_t n = std::min(block, cache.rows() - start);
      const at::Tensor m = cache.read_masks(start, n);
      const at::Tensor valid = m != ignore_index_;
      if (!valid.any().item<bool>()) continue;
      const at::Tensor values = m.masked_select(valid);
      const std::int64_t lo = values.min().item<std::int64_t>();
      const std::int64_t hi = values.max().item<std::int64_t>();
      if (lo < 0 || (options.num_classes > 0 && hi >= options.num_classes)) {
        const bool low = lo < 0;
        const at::Tensor bad = low ? at::logical_and(valid, m < 0) : at::logical_and(valid, m >= options.num_classes);
        const std::int64_t row = start + bad.flatten(1).any(1).nonzero().min().item<std::int64_t>();
        const CacheIndex index = cache.read_index();
        throw InputError(cache.path() + ": row " + std::to_string(row) + " (" + index.groups[row] + "/" +
                         index.windows[row] + ") has mask class " + std::to_string(low ? lo : hi) +
                         (low ? ", below 0 and not the ignore index " + std::to_string(ignore_index_) +
                                    "; set --ignore-index"
                              : ", outside [0, " + std::to_string(options.num_classes) +
                                    ") set by --num-classes; raise --num-classes"));
      }
      if (hi >= kMaxClasses) {
        throw InputError(cache.path() + ": a mask has class " + std::to_string(hi) + "; class ids must be from 0 to " +
                         std::to_string(kMaxClasses - 1) + " (or the ignore index)");
      }
      max_class = std::max(max_class, hi);
    }
  }
  num_outputs_ = options.num_classes > 0 ? options.num_classes : max_class + 1;
  if (num_outputs_ < 2) {
    throw InputError(caches_.front()->path() + ": the masks hold fewer than two classes besides the ignore "
                     "index " + std::to_string(ignore_index_) + "; segmentation needs at least two (or --num-classes)");
  }
}

const LevelSpec& find_level(const CacheReader& cache, const std::string& name_or_index) {
  for (const auto& l : cache.levels()) {
    if (l.name == name_or_index) return l;
  }
  for (const auto& l : cache.levels()) {
    if (std::to_string(l.index) == name_or_index) return l;
  }
  std::string names;
  for (const auto& l : cache.levels()) names += (names.empty() ? "" : ", ") + l.name + " " + l.shape_text();
  throw UsageError(OptionName{"levels"}, "level '" + name_or_index + "' is not in " + cache.path() + "; its levels are: " + names);
}

TrainRowKeys ProbeData::train_row_keys() const {
  if (train_windows_.size() != std::size_t(train().size())) throw std::logic_error("ProbeData: built without window keys");
  TrainRowKeys keys;
  keys.window = train_windows_;
  if (task_ == ProbeTask::kClassification) {
    const at::Tensor labels = targets_[0].contiguous();
    keys.label.assign(labels.data_ptr<std::int64_t>(), labels.data_ptr<std::int64_t>() + labels.numel());
    keys.class_names = caches_.front()->label_kinds().class_names;
  }
  return keys;
}

const LevelSpec& ProbeData::level(const std::string& name_or_index) const {
  return find_level(*caches_.front(), name_or_index);
}

}  // namespace embcache
