// Stage 2 of precompute: cuts each read window into its crops, hashes each crop's content,
// skips the crops the cache holds with that hash, and normalises the rest for the encoder.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "embcache/core/clock.hpp"
#include "embcache/core/label_kinds.hpp"
#include "embcache/host/tensor_recycler.hpp"
#include "embcache/dataset/crop_grid.hpp"
#include "embcache/dataset/cropper.hpp"
#include "embcache/encoder/preprocess.hpp"
#include "embcache/pipeline/core_sharing.hpp"
#include "embcache/pipeline/stage_items.hpp"
#include "embcache/store/cache_store.hpp"

namespace embcache {

// The content hash stored per row: the crop's input pixels and its labels, so that changed pixels
// or corrected labels both cause a recompute.
std::uint64_t content_hash(const CropPixels& crop, const WindowData& window, const LabelKinds& kinds);

class PrepStage {
 public:
  struct Settings {
    CropGridSpec grid;
    CropperOptions cropper;  // with the dataset's ignore index as the mask pad
    Preprocess preprocess;
    LabelKinds labels;
    bool allow_nonfinite = false;
    // An optimised encoder's fused activations turn NaN into numbers (oneDNN's ReLU maps it to
    // 0), so the features would not show it: NaN/Inf input pixels are refused here instead,
    // with --allow-nonfinite too.
    bool refuse_nonfinite_input = false;
    // Crops are normalised into batches of this many slots, in the order they are pushed, so
    // that the encoder forms its batches of them without a copy (EncodeStage); 0: each crop
    // in a tensor of its own.
    std::int64_t batch_slots = 0;
    // Batches whose memory is filled again once the encoder and the later stages are done with
    // them (TensorRecycler says why): at most as many as the queues hold at their fullest, so
    // memory stays what the run already needed.
    std::size_t kept_batches = 0;
  };
  // `committed`: the cache's rows, map_key -> content hash.
  // `committed` and `committed_splits`: the cache's rows (CacheStore::committed): a crop whose key
  // is there with the same content hash and split is skipped.
  PrepStage(RawQueue& in, CropQueue& out, const std::vector<WindowInfo>& windows, Settings settings,
            const std::unordered_map<std::string, CacheStore::CommittedRow>& committed,
            const std::vector<std::string>& committed_splits, const StagePriority& priority);

  // Until the raw queue is drained; then closes the crop queue.
  void run();

  StageTime time;
  std::atomic<std::int64_t> skipped{0};  // cached with the same content hash
  std::atomic<std::int64_t> stale{0};    // cached with another hash or split: recomputed

 private:
  // False when the crop queue was closed (the run failed).
  bool prepare(const RawWindow& raw, StageStopwatch& watch);
  // Where the next crop's input goes: the next slot of the batch being filled (a crop of another
  // shape starts a new one), or a tensor of its own.
  at::Tensor next_slot(at::IntArrayRef shape);

  RawQueue& in_;
  CropQueue& out_;
  const std::vector<WindowInfo>& windows_;
  const Settings settings_;
  const std::unordered_map<std::string, CacheStore::CommittedRow>& committed_;
  const std::vector<std::string>& committed_splits_;
  const StagePriority& priority_;
  at::Tensor batch_;  // [batch_slots, crop shape], filled up to batch_used_
  std::int64_t batch_used_ = 0;
  TensorRecycler batches_;  // where batch_ comes from
};

}  // namespace embcache
