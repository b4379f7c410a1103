// Stage 3 of precompute: gathers crops into batches of one size (chosen by timing under
// --batch-size auto), runs the encoder on them, and hands the selected levels on. The only
// thread that sets LibTorch's intra-op threads and calls the encoder.
#pragma once

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "embcache/core/clock.hpp"
#include "embcache/host/tensor_recycler.hpp"
#include "embcache/encoder/encoder.hpp"
#include "embcache/encoder/level_layout.hpp"
#include "embcache/pipeline/core_sharing.hpp"
#include "embcache/pipeline/run_context.hpp"
#include "embcache/pipeline/stage_items.hpp"
#include "embcache/store/storage_options.hpp"

namespace embcache {

class EncodeStage {
 public:
  struct Settings {
    std::optional<std::int64_t> batch_size;  // nullopt: time a few sizes first
    c10::Device device{c10::kCPU};
    int threads = 1;
    std::vector<std::string> level_request;  // empty = every level
    LayoutOptions layout;                     // how outputs become levels (tokens, channels-last, time)
    // The stored type: features leave in it (own_rows), and light or heavy is judged by it.
    StorageDtype dtype = StorageDtype::kFloat32;
    // On a CPU, the batches of features alive at once after the encoder's (those queued for and
    // held by the convert stage, queued for and held by the writer): the rows they are copied
    // into are filled again once written (own_rows).
    std::size_t kept_batches = 0;
    std::function<void(std::int64_t batch, double seconds)> on_call;  // precompute.hpp's on_encoder_call
    std::function<void()> on_call_start;                              // and on_encoder_call_start
  };
  // Time and calls of the encoder in this run (batch-size trials included).
  struct Stats {
    double seconds = 0;
    std::int64_t calls = 0;
    std::int64_t batch_size = 0;  // the size every stored batch was encoded at
    nlohmann::json trials = nlohmann::json::array();  // --batch-size auto: {batch_size, crops_per_second}
    std::optional<Clock::time_point> first_call_start, last_call_end;
    std::vector<std::int64_t> input_shape;  // [C, h, w] (or [T, C, h, w]) of one crop
    std::int64_t waits = 0;   // times the encoder waited for the stages (crops, or room for features)
    double wait_seconds = 0;  // and how long in all
  };

  EncodeStage(CropQueue& in, EncodedQueue& out, Encoder& encoder, Settings settings, StagePriority& priority,
              RunContext& context);

  // Until the crop queue is drained; then closes the encoded queue.
  void run();

  Stats stats;

 private:
  EncoderOutput call(const at::Tensor& batch);
  // --batch-size auto: times candidate sizes on the first crops (kept in `pending` for encoding).
  void choose_batch_size(std::vector<CropItem>& pending);
  // The layout and the stored levels' specs, from the first batch's output; the specs are shared
  // through the run context.
  void describe_levels(const EncoderOutput& out, const CropItem& first);
  // Encodes one batch (a short last one padded to the full size) and pushes it on; false when
  // the encoded queue was closed.
  bool emit(std::vector<CropItem> items);
  // On a CPU: the selected levels copied into rows of the stored type (int8: of the level's own
  // float type, which quantisation reads), in memory recycled across batches, so that no output
  // of this call is alive at the next: an encoder's calls run slower while earlier outputs hold
  // the blocks its allocator would give the next call (docs/performance.md).
  // On a GPU the levels go on as they are: the convert stage converts them on the device, before
  // they cross.
  std::vector<at::Tensor> own_rows(std::vector<at::Tensor> levels);
  // Runs a wait for the queues with the encoder's OpenMP workers asleep (CPU only), and reports
  // its length to the stage priority (starved idle stages move to normal scheduling).
  void wait_cores_free(const std::function<void()>& wait);
  // Moves crops from the queue into `pending` until it holds `n`; false when the queue ran dry
  // first (the run's end). Missing crops are waited for together, through one wait_cores_free,
  // not one by one: taken singly, each crop would wake this thread and its OpenMP team, and the
  // first call would start late.
  bool fill(std::vector<CropItem>& pending, std::size_t n);

  CropQueue& in_;
  EncodedQueue& out_;
  Encoder& encoder_;
  const Settings settings_;
  StagePriority& priority_;
  RunContext& context_;
  std::size_t batch_ = 0;  // fixed once chosen
  std::optional<LevelLayout> layout_;
  std::vector<std::size_t> selected_;
  std::vector<LevelSpec> specs_;
  double last_call_seconds_ = 0;
  std::vector<TensorRecycler> level_rows_;  // per stored level, CPU only
};

}  // namespace embcache
