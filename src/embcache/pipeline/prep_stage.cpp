#include "embcache/pipeline/prep_stage.hpp"

#include <ATen/ATen.h>

#include "embcache/core/error.hpp"
#include "embcache/core/pixel_hash.hpp"

namespace embcache {
namespace {

std::uint64_t combine(std::uint64_t h, std::uint64_t v) {
  return h ^ (v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2));
}

}  // namespace

std::uint64_t content_hash(const CropPixels& crop, const WindowData& window, const LabelKinds& kinds) {
  std::uint64_t h = pixel_hash(crop.pixels.data_ptr(), crop.pixels.nbytes());
  if (crop.mask.defined()) h = combine(h, pixel_hash(crop.mask.data_ptr(), crop.mask.nbytes()));
  if (crop.pixel_value.defined()) h = combine(h, pixel_hash(crop.pixel_value.data_ptr(), crop.pixel_value.nbytes()));
  if (kinds.has_class) h = combine(h, pixel_hash(&window.label_class, sizeof window.label_class));
  if (kinds.has_value) {
    h = combine(h, pixel_hash(window.label_value.data_ptr(), window.label_value.nbytes()));
  }
  return h;
}

PrepStage::PrepStage(RawQueue& in, CropQueue& out, const std::vector<WindowInfo>& windows, Settings settings,
                     const std::unordered_map<std::string, CacheStore::CommittedRow>& committed,
                     const std::vector<std::string>& committed_splits, const StagePriority& priority)
    : in_(in), out_(out), windows_(windows), settings_(std::move(settings)), committed_(committed),
      committed_splits_(committed_splits), priority_(priority), batches_(settings_.kept_batches) {}

bool PrepStage::prepare(const RawWindow& raw, StageStopwatch& watch) {
  const WindowInfo& info = windows_[raw.index];
  for (const Bounds& bounds : crop_grid(info.bounds, settings_.grid)) {
    CropPixels crop = cut_crop(raw.data.pixels, raw.data.mask, info.bounds, bounds, settings_.cropper, raw.data.pixel_value);
    CropItem item;
    item.key = CropKey{info.group, info.name, bounds};
    item.hash = content_hash(crop, raw.data, settings_.labels);
    const auto found = committed_.find(item.key.map_key());
    if (found != committed_.end()) {
      // A window moved to another split (the dataset's /splits, an rslearn split tag) keeps its
      // pixels: its rows are stale all the same, or they would stay in the split they left.
      const CacheStore::CommittedRow& row = found->second;
      if (row.content_hash == item.hash && committed_splits_[row.split] == info.split) {
        ++skipped;
        continue;
      }
      ++stale;
    }
    item.split = info.split;
    item.input = next_slot(crop.pixels.sizes());
    settings_.preprocess.apply_into(crop.pixels, item.input);
    // Noted for the error message: NaN features from NaN pixels need the dataset fixed. Only
    // float pixels can hold NaN/Inf, so integer datasets skip the pass. An optimised encoder's
    // are refused even under --allow-nonfinite, which asks to store the NaN features the pixels
    // make, not the finite ones the fused activations would put in their place.
    if ((!settings_.allow_nonfinite || settings_.refuse_nonfinite_input) && crop.pixels.is_floating_point()) {
      item.input_nonfinite = !at::isfinite(item.input).all().item<bool>();
      if (item.input_nonfinite && settings_.refuse_nonfinite_input) {
        throw InputError("crop " + item.key.describe() + " has NaN/Inf input pixels (after preprocessing), which the "
                         "optimised encoder would turn into finite features; fill them in the dataset (for rslearn "
                         "rasters, declare the nodata value), or pass --no-optimize to see what the encoder makes of them");
      }
    }
    item.label_class = raw.data.label_class;
    item.label_value = raw.data.label_value;
    item.mask = crop.mask;
    item.pixel_value = crop.pixel_value;
    watch.add_to(time);
    if (!out_.push(std::move(item))) return false;
    watch.restart();  // time blocked in push is not busy time
  }
  return true;
}

at::Tensor PrepStage::next_slot(at::IntArrayRef shape) {
  if (settings_.batch_slots <= 0) return at::empty(shape, at::kFloat);
  if (!batch_.defined() || batch_used_ == batch_.size(0) || batch_.sizes().slice(1) != shape) {
    std::vector<std::int64_t> sizes{settings_.batch_slots};
    sizes.insert(sizes.end(), shape.begin(), shape.end());
    batch_ = batches_.take(sizes, at::kFloat);
    batch_used_ = 0;
  }
  return batch_[batch_used_++];
}

void PrepStage::run() {
  const CpuLedger cpu(time);
  bool normal_now = true;  // threads start at normal scheduling
  priority_.follow(normal_now);
  while (auto raw = in_.pop()) {
    priority_.follow(normal_now);
    StageStopwatch watch;
    if (!prepare(*raw, watch)) return;
    watch.add_to(time);
  }
  batch_ = at::Tensor();  // its crops keep it while they need it
  batches_.clear();
  out_.close();
}

}  // namespace embcache
