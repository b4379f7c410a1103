#include "embcache/pipeline/encode_stage.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>

#include "embcache/core/error.hpp"
#include "embcache/host/intra_op_threads.hpp"
#include "embcache/pipeline/batch_size_search.hpp"

namespace embcache {
namespace {

// Whether the inputs of items [begin, end) lie one after another in one tensor: consecutive
// slots of a batch the prep stage filled (PrepStage::Settings::batch_slots).
bool consecutive_slots(const std::vector<CropItem>& items, std::size_t begin, std::size_t end) {
  const at::Tensor& first = items[begin].input;
  if (!first.is_contiguous()) return false;
  for (std::size_t i = begin + 1; i < end; ++i) {
    const at::Tensor& t = items[i].input;
    if (!t.is_contiguous() || t.sizes() != first.sizes() || t.scalar_type() != first.scalar_type() ||
        !t.storage().is_alias_of(first.storage()) ||
        t.storage_offset() != first.storage_offset() + std::int64_t(i - begin) * first.numel()) {
      return false;
    }
  }
  return true;
}

// The inputs of items [begin, end) as one batch: a view when they are consecutive slots (a copy
// would run on the encoder's thread, between its calls), else stacked.
at::Tensor stack_inputs(const std::vector<CropItem>& items, std::size_t begin, std::size_t end) {
  if (consecutive_slots(items, begin, end)) {
    const at::Tensor& first = items[begin].input;
    std::vector<std::int64_t> sizes{std::int64_t(end - begin)}, strides{first.numel()};
    sizes.insert(sizes.end(), first.sizes().begin(), first.sizes().end());
    strides.insert(strides.end(), first.strides().begin(), first.strides().end());
    return first.as_strided(sizes, strides, first.storage_offset());
  }
  std::vector<at::Tensor> inputs;
  inputs.reserve(end - begin);
  for (std::size_t i = begin; i < end; ++i) inputs.push_back(items[i].input);
  return at::stack(inputs);
}

// Tells the stages that the encoder is inside a forward call, for as long as it lives.
class CallGate {
 public:
  explicit CallGate(StagePriority* priority) : priority_(priority) {
    if (priority_) priority_->encoder_call_begins();
  }
  ~CallGate() {
    if (priority_) priority_->encoder_call_ends();
  }
  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

 private:
  StagePriority* priority_;
};

void sync_device(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

}  // namespace

EncodeStage::EncodeStage(CropQueue& in, EncodedQueue& out, Encoder& encoder, Settings settings, StagePriority& priority,
                         RunContext& context)
    : in_(in), out_(out), encoder_(encoder), settings_(std::move(settings)), priority_(priority), context_(context) {
  stats.batch_size = settings_.batch_size.value_or(0);
}

void EncodeStage::wait_cores_free(const std::function<void()>& wait) {
  // Waits (for crops, or for room to hand over features) leave the cores to the stages: on a
  // CPU the OpenMP workers sleep instead of spinning (core_sharing.hpp). Entering that region
  // costs a parallel region's start, so callers skip it where the queue already allows going on.
  stats.wait_seconds += priority_.encoder_waits([&] {
    if (settings_.device.is_cuda()) {
      wait();
    } else {
      wait_with_openmp_workers_asleep(settings_.threads, wait);
    }
  });
  ++stats.waits;
}

bool EncodeStage::fill(std::vector<CropItem>& pending, std::size_t n) {
  while (pending.size() < n) {
    const std::size_t missing = n - pending.size();
    if (!in_.items_ready(missing)) wait_cores_free([&] { in_.wait_for_items(missing); });
    auto item = in_.pop();
    if (!item) return false;
    pending.push_back(std::move(*item));
  }
  return true;
}

EncoderOutput EncodeStage::call(const at::Tensor& batch) {
  if (settings_.on_call_start) settings_.on_call_start();
  const auto t0 = Clock::now();
  if (!stats.first_call_start) stats.first_call_start = t0;
  EncoderOutput out;
  {
    // Idle stages wait while the encoder computes on the CPU; a GPU's calls leave the cores free.
    const CallGate gate(settings_.device.is_cuda() ? nullptr : &priority_);
    out = encoder_.forward(batch);
  }
  sync_device(settings_.device);
  stats.last_call_end = Clock::now();
  last_call_seconds_ = std::chrono::duration<double>(*stats.last_call_end - t0).count();
  stats.seconds += last_call_seconds_;
  ++stats.calls;
  if (settings_.on_call) settings_.on_call(batch.size(0), last_call_seconds_);
  return out;
}

void EncodeStage::choose_batch_size(std::vector<CropItem>& pending) {
  const std::vector<std::int64_t> candidates = settings_.device.is_cuda() ? std::vector<std::int64_t>{16, 32, 64, 128, 256}
                                                                          : std::vector<std::int64_t>{4, 8, 16, 32, 64};
  fill(pending, std::size_t(candidates.back()));
  std::vector<std::int64_t> usable;
  for (auto c : candidates) {
    if (c <= std::int64_t(pending.size())) usable.push_back(c);
  }
  if (usable.size() < 2) {
    stats.batch_size = std::int64_t(pending.size());
    return;
  }
  BatchSizeSearch search;
  for (auto c : usable) {
    // Best of two: the first call at a new shape pays allocation and kernel selection.
    // A copy: the batch later emitted is a view of the same slots, and an encoder may change its
    // input in place.
    const at::Tensor inputs = stack_inputs(pending, 0, std::size_t(c)).clone();
    double fastest = 1e30;
    for (int repeat = 0; repeat < 2; ++repeat) {
      const auto t0 = Clock::now();
      call(inputs);
      fastest = std::min(fastest, seconds_since(t0));
    }
    const double rate = double(c) / std::max(fastest, 1e-9);
    stats.trials.push_back({{"batch_size", c}, {"crops_per_second", rate}});
    // Sizes that lose are not tried further: on a short run their trials are a noticeable share
    // of the wall time.
    if (!search.record(c, rate)) break;
  }
  stats.batch_size = search.chosen();
}

void EncodeStage::describe_levels(const EncoderOutput& out, const CropItem& first) {
  stats.input_shape.assign(first.input.sizes().begin(), first.input.sizes().end());
  layout_.emplace(out, first.input.unsqueeze(0), settings_.layout);
  selected_ = layout_->select(settings_.level_request);
  const StoredLevels stored = layout_->apply(out);
  const std::int64_t h = first.input.size(-2);
  for (std::size_t i : selected_) {
    const at::Tensor& t = stored.levels[i];
    LevelSpec spec;
    spec.name = stored.names[i];
    spec.index = stored.output_index[i];
    spec.origin = stored.origins[i];
    spec.row_shape.assign(t.sizes().begin() + 1, t.sizes().end());
    const std::int64_t map_h = spec.is_map() ? t.size(t.dim() - 2) : 0;
    spec.stride = map_h > 0 ? h / map_h : 0;
    specs_.push_back(spec);
  }
  context_.set_levels(specs_);
}

std::vector<at::Tensor> EncodeStage::own_rows(std::vector<at::Tensor> levels) {
  if (settings_.device.is_cuda()) return levels;
  if (level_rows_.size() < levels.size()) level_rows_.resize(levels.size(), TensorRecycler(settings_.kept_batches + 1));
  for (std::size_t k = 0; k < levels.size(); ++k) {
    const at::ScalarType type =
        settings_.dtype == StorageDtype::kInt8 ? levels[k].scalar_type() : torch_type(settings_.dtype);
    at::Tensor rows = level_rows_[k].take(levels[k].sizes(), type);
    rows.copy_(levels[k]);
    levels[k] = std::move(rows);
  }
  return levels;
}

bool EncodeStage::emit(std::vector<CropItem> items) {
  at::Tensor inputs = stack_inputs(items, 0, items.size());
  const std::int64_t n = inputs.size(0);
  // A short last batch is padded to the full size and cut back: every call has one shape, so a
  // crop's features never depend on where batch boundaries fell (reruns after a crash give
  // bit-identical features).
  if (batch_ > 0 && std::size_t(n) < batch_) {
    std::vector<std::int64_t> pad(inputs.sizes().begin(), inputs.sizes().end());
    pad[0] = std::int64_t(batch_) - n;
    inputs = at::cat({inputs, at::zeros(pad)});
  }
  EncoderOutput out = call(inputs);
  if (inputs.size(0) != n) {
    for (auto& level : out.levels) level = level.slice(0, 0, n);
  }
  if (!layout_) describe_levels(out, items.front());
  const StoredLevels stored = layout_->apply(out);
  EncodedBatch encoded;
  for (std::size_t k = 0; k < selected_.size(); ++k) {
    const at::Tensor& t = stored.levels[selected_[k]];
    if (std::vector<std::int64_t>(t.sizes().begin() + 1, t.sizes().end()) != specs_[k].row_shape) {
      throw InputError("encoder level " + specs_[k].name + " changed shape between batches: " + specs_[k].shape_text() +
                       " then " + std::string(c10::str(t.sizes().slice(1))) + "; every crop must give the same feature shape");
    }
    encoded.levels.push_back(t);
  }
  encoded.levels = own_rows(std::move(encoded.levels));
  // Light or heavy, judged on the stored batches (the batch-size trials are not).
  std::int64_t feature_bytes = 0;
  for (const auto& t : encoded.levels) feature_bytes += t.numel() * std::int64_t(element_size(settings_.dtype));
  priority_.observe(double(feature_bytes), last_call_seconds_);
  for (auto& item : items) item.input = at::Tensor();  // free inputs early
  encoded.items = std::move(items);
  if (!out_.has_space()) wait_cores_free([&] { out_.wait_for_space(); });
  return out_.push(std::move(encoded));
}

void EncodeStage::run() {
  // Only this thread sets the intra-op thread count: in LibTorch it is partly process-wide, and
  // a second setter would race it (features differ in the last bit between thread counts).
  // run_precompute has set it already, before loading the encoder; then this changes nothing.
  use_intra_op_threads(settings_.threads);
  std::vector<CropItem> pending;
  if (!settings_.batch_size) choose_batch_size(pending);
  batch_ = std::size_t(std::max<std::int64_t>(stats.batch_size, 1));
  while (true) {
    while (pending.size() >= batch_) {
      std::vector<CropItem> items(std::make_move_iterator(pending.begin()),
                                  std::make_move_iterator(pending.begin() + std::ptrdiff_t(batch_)));
      pending.erase(pending.begin(), pending.begin() + std::ptrdiff_t(batch_));
      if (!emit(std::move(items))) return;
    }
    if (!fill(pending, batch_)) break;
  }
  if (!pending.empty() && !context_.failed()) emit(std::move(pending));
  out_.close();
}

}  // namespace embcache
