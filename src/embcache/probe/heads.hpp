// Probe heads as banks: G heads of one architecture whose parameters are stacked along a leading
// axis, trained together in one call per batch, each exportable alone as TorchScript.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "embcache/core/enum_table.hpp"
#include "embcache/probe/probe_data.hpp"
#include "embcache/probe/temporal_pool.hpp"

namespace embcache {

// kLogreg: a linear head on pooled, standardised features whose weights are fitted by L-BFGS
// (probe/logistic_regression.hpp) rather than trained by epochs.
// kKnn: k-nearest-neighbour vote on pooled features (probe/knn.hpp); it has no weights.
enum class HeadType { kLinear, kMlp, kConv, kFpn, kUnet, kPixelShuffle, kUpernet, kLogreg, kKnn };
const EnumTable<HeadType>& head_types();
const char* head_name(HeadType type);  // head_types()'s name

// The checks that need no cache: level count and task. UsageError naming the problem.
void check_head_levels(HeadType type, ProbeTask task, std::size_t level_count, const std::string& levels_text);

struct HeadConfig {
  HeadType type = HeadType::kLinear;
  ProbeTask task = ProbeTask::kClassification;
  std::vector<std::string> levels;                     // cache level names
  std::vector<std::vector<std::int64_t>> level_shapes;  // per level: [C, H, W] or [C], time pooled
  std::vector<bool> temporal;        // per level: stored with a time axis (reduced inside head.pt)
  TemporalPool temporal_pool = TemporalPool::kMean;
  std::int64_t outputs = 0;                            // classes or regression width
  std::vector<std::int64_t> out_size;                  // {h, w} of the mask for dense tasks
  std::vector<std::int64_t> hidden;                    // mlp widths; conv/fpn/unet/upernet width = hidden[0]
  double dropout = 0.0;
  std::int64_t conv_blocks = 2;
  bool standardize = false;

  // True when the head reads only globally pooled features (so the feed may pool on load).
  bool pooled_input() const;
  // Whether G > 1 heads can share one bank (stacked parameters); otherwise one bank per head.
  bool bankable() const;
  std::string levels_text() const;  // "2" or "2+3"
  // Throws UsageError naming the problem when the architecture cannot work on these levels.
  void validate() const;
};

// Loads the head.pt at `path` back (TorchScript, as a user's torch.jit.load would): IoError
// naming the file when it does not load, as a head written to a full disk does not.
void check_head_loads(const std::string& path);

class HeadBank {
 public:
  // `members` heads, each initialised exactly as a lone head with `seed` would be.
  HeadBank(const HeadConfig& config, std::int64_t members, std::uint64_t seed, c10::Device device);
  // Member g initialised as a lone head with member_seeds[g] would be; dropout masks (shared by
  // the members) drawn from `pass_seed`.
  HeadBank(const HeadConfig& config, const std::vector<std::uint64_t>& member_seeds, std::uint64_t pass_seed,
           c10::Device device);
  ~HeadBank();
  HeadBank(HeadBank&&) noexcept;

  const HeadConfig& config() const;
  std::int64_t members() const;
  // Per-level channel statistics (from the training split) applied before the head.
  void set_standardization(const std::vector<at::Tensor>& mean, const std::vector<at::Tensor>& std);
  // Inputs in config().levels order (pooled [B, C] or maps [B, C, H, W], float32). Returns
  // [G, B, outputs] or, for dense tasks, [G, B, outputs, h, w]. `train` enables dropout.
  at::Tensor forward(const std::vector<at::Tensor>& inputs, bool train);
  std::vector<at::Tensor> parameters() const;  // stacked along dim 0, requires_grad
  // Pooled heads: the features the first layer reads, [B, D] (each level pooled, standardised,
  // concatenated), as forward computes them.
  at::Tensor pooled_features(const std::vector<at::Tensor>& inputs) const;
  // Copies of member g's parameter slices, and their restoration.
  std::vector<at::Tensor> member_state(std::int64_t g) const;
  void load_member_state(std::int64_t g, const std::vector<at::Tensor>& state);
  // Member g alone as a TorchScript module: forward(List[Tensor]) -> Tensor, standardisation
  // inside, inputs as read from the cache (maps are pooled inside when the head pools).
  void save_member(std::int64_t g, const std::string& path) const;
  // The generated TorchScript source, for tests and docs.
  std::string source() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace embcache
