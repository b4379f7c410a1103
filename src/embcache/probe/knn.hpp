// --head knn: k-nearest-neighbour classification on pooled, L2-normalised features by cosine
// similarity against the train split, with DINO's temperature-weighted vote; one top-k pass
// over the train rows serves every k of the grid.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace embcache {

at::Tensor l2_normalize(const at::Tensor& x);  // rows to unit length (zero rows stay zero)

// The running k_max nearest train rows of every query, fed the train split block by block (so
// the train features never need to be in memory at once).
class KnnNeighbours {
 public:
  // queries: [m, D] L2-normalised, on the device the blocks come on.
  KnnNeighbours(at::Tensor queries, std::int64_t k_max);
  // bank: [b, D] L2-normalised train features; labels: int64 [b].
  void add(const at::Tensor& bank, const at::Tensor& labels);
  std::int64_t seen() const { return seen_; }
  // Class scores [m, classes] from the k nearest (k <= k_max): sum of exp(similarity / T) per
  // class, as DINO's k-NN evaluation.
  at::Tensor scores(std::int64_t k, std::int64_t classes, double temperature) const;

 private:
  at::Tensor queries_, similarity_, labels_;  // [m, <= k_max]
  std::int64_t k_max_ = 0, seen_ = 0;
};

// head.pt of a k-NN probe: the train bank (features, labels) and the vote, as TorchScript taking
// the levels as read from the cache (maps pooled inside) and returning class scores [B, classes].
void save_knn_head(const std::string& path, const at::Tensor& bank, const at::Tensor& labels, std::int64_t k,
                   std::int64_t classes, double temperature);

}  // namespace embcache
