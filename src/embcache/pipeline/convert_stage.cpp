#include "embcache/pipeline/convert_stage.hpp"

#include <ATen/ATen.h>

#include "embcache/core/error.hpp"
#include "embcache/store/finite_check.hpp"
#include "embcache/store/fletcher32.hpp"
#include "embcache/store/int8_quantization.hpp"

namespace embcache {

std::optional<NonfiniteAt> scan_rows(RowBatch& rows, const StorageOptions& storage, bool check_finite) {
  const std::int64_t n = rows.levels.empty() ? 0 : rows.levels.front().size(0);
  if (n == 0) return std::nullopt;
  const std::size_t elem = element_size(storage.dtype);
  const bool sums = storage.own_checksums();
  for (std::size_t k = 0; k < rows.levels.size(); ++k) {
    const at::Tensor& t = rows.levels[k];
    const std::size_t row_values = std::size_t(t.numel() / n);
    const std::size_t row_bytes = row_values * elem;
    const auto* data = static_cast<const std::uint8_t*>(t.data_ptr());
    std::vector<std::uint32_t> row_sums;
    if (sums) row_sums.reserve(std::size_t(n));
    for (std::int64_t row = 0; row < n; ++row) {
      const std::uint8_t* at = data + std::size_t(row) * row_bytes;
      if (check_finite && !all_finite(at, row_values, storage.dtype)) return NonfiniteAt{k, row};
      if (sums) row_sums.push_back(fletcher32(at, row_bytes));
    }
    if (sums) rows.row_checksums.push_back(std::move(row_sums));
  }
  return std::nullopt;
}

ConvertStage::ConvertStage(EncodedQueue& in, RowQueue& out, StorageOptions storage, bool allow_nonfinite,
                           LabelKinds labels, RunContext& context, const StagePriority& priority)
    : in_(in), out_(out), storage_(std::move(storage)), allow_nonfinite_(allow_nonfinite), labels_(std::move(labels)),
      context_(context), priority_(priority) {}

void ConvertStage::gather_labels(const std::vector<CropItem>& items, RowBatch& rows) const {
  std::vector<std::int64_t> classes;
  std::vector<at::Tensor> values, masks, pixel_values;
  for (const auto& item : items) {
    rows.groups.push_back(item.key.group);
    rows.windows.push_back(item.key.window);
    rows.splits.push_back(item.split);
    for (auto v : item.key.bounds.as_array()) rows.bounds.push_back(v);
    rows.pixel_hashes.push_back(item.hash);
    if (labels_.has_class) classes.push_back(item.label_class);
    if (labels_.has_value) values.push_back(item.label_value);
    if (labels_.has_mask) masks.push_back(item.mask);
    if (labels_.has_pixel_value) pixel_values.push_back(item.pixel_value);
  }
  if (labels_.has_class) rows.label_class = at::tensor(classes, at::kLong);
  if (labels_.has_value) rows.label_value = at::stack(values).contiguous();
  if (labels_.has_mask) rows.label_mask = at::stack(masks).contiguous();
  if (labels_.has_pixel_value) rows.label_pixel_value = at::stack(pixel_values).contiguous();
}

namespace {

// A level's rows on the host as stored: converted by torch, never by HDF5 (values too large for a
// 16-bit dtype become Inf here), into memory of `memory`; on a GPU the conversion comes first, so
// that fewer bytes cross to the host. Rows the encoder returned as stored are kept as they are.
at::Tensor host_rows(const at::Tensor& level, at::ScalarType stored, TensorRecycler& memory) {
  if (level.is_cpu() && level.scalar_type() == stored && level.is_contiguous()) return level;
  at::Tensor host = memory.take(level.sizes(), stored);
  host.copy_(level.is_cpu() ? level : level.to(stored));
  return host;
}

}  // namespace

RowBatch ConvertStage::convert(EncodedBatch& encoded) {
  if (specs_.empty()) specs_ = context_.levels();
  const at::ScalarType target = torch_type(storage_.dtype);
  RowBatch rows;
  if (storage_.dtype == StorageDtype::kInt8) return quantize(encoded);
  if (level_rows_.size() < encoded.levels.size()) level_rows_.resize(encoded.levels.size(), TensorRecycler(kKeptRows));
  for (std::size_t k = 0; k < encoded.levels.size(); ++k) {
    rows.levels.push_back(host_rows(encoded.levels[k], target, level_rows_[k]));
    feature_bytes += std::int64_t(rows.levels.back().nbytes());
  }
  if (const auto bad = scan_rows(rows, storage_, !allow_nonfinite_)) {
    const CropItem& item = encoded.items[std::size_t(bad->row)];
    if (item.input_nonfinite) {
      throw InputError("crop " + item.key.describe() + " has NaN/Inf input pixels (after preprocessing), so level " +
                       specs_[bad->level].name + " has NaN/Inf features; fill them in the dataset (for rslearn "
                       "rasters, declare the nodata value), or pass --allow-nonfinite to store them");
    }
    throw InputError("level " + specs_[bad->level].name + " of crop " + item.key.describe() +
                     " has NaN/Inf features (or values too large for " + to_string(storage_.dtype) +
                     "); fix the encoder or input, or pass --allow-nonfinite to store them");
  }
  gather_labels(encoded.items, rows);
  return rows;
}

RowBatch ConvertStage::quantize(EncodedBatch& encoded) {
  RowBatch rows;
  for (std::size_t k = 0; k < encoded.levels.size(); ++k) {
    const at::Tensor& level = encoded.levels[k];
    // int8 holds no NaN/Inf (plan_precompute refuses --allow-nonfinite with it): find the first.
    const at::Tensor bad_rows = (~at::isfinite(level.to(at::kFloat))).reshape({level.size(0), -1}).any(1);
    if (bad_rows.any().item<bool>()) {
      const std::int64_t row = bad_rows.nonzero().select(1, 0)[0].item<std::int64_t>();
      const CropItem& item = encoded.items[std::size_t(row)];
      throw InputError("level " + specs_[k].name + " of crop " + item.key.describe() + " has NaN/Inf features" +
                       (item.input_nonfinite ? " (its input pixels have NaN/Inf after preprocessing)" : "") +
                       ", which --dtype int8 cannot store; fix the encoder or input, or store a float dtype with "
                       "--allow-nonfinite");
    }
    // On the encoder's device, before the copy to the host: a quarter of the bytes cross.
    Int8Rows q = quantize_int8(level, specs_[k].is_map() ? 2 : 1);
    rows.levels.push_back(q.values.to(at::kCPU).contiguous());
    rows.scales.push_back(q.scales.to(at::kCPU).contiguous());
    feature_bytes += std::int64_t(rows.levels.back().nbytes() + rows.scales.back().nbytes());
  }
  scan_rows(rows, storage_, false);  // the row checksums
  gather_labels(encoded.items, rows);
  return rows;
}

void ConvertStage::run() {
  const CpuLedger cpu(time);
  bool normal_now = true;  // threads start at normal scheduling
  priority_.follow(normal_now);
  while (auto encoded = in_.pop()) {
    priority_.follow(normal_now);
    const StageStopwatch watch;
    RowBatch rows = convert(*encoded);
    watch.add_to(time);
    if (!out_.push(std::move(rows))) return;
  }
  out_.close();
}

}  // namespace embcache
