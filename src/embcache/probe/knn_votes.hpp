// --head knn: the val and test rows are the queries of one blocked pass over each train group's
// rows (probe/knn.hpp), which keeps every query's k_max nearest rows; every k of the grid votes
// from them. Nothing is trained: validation and test come from the same pass.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace embcache {

class ProbePass;
struct Combination;

class KnnVotes {
 public:
  // Votes every combination of `pass` (all knn): validation and test metrics, history and
  // timing in the pass. Keeps the train rows' features for head.pt unless they were streamed.
  explicit KnnVotes(ProbePass& pass);

  // Writes combination c's head.pt (the train bank and the vote); empty when the train split was
  // streamed, so there is none. Valid while this object lives.
  std::function<void(const std::string&)> head_saver(const Combination& c) const;

 private:
  const ProbePass& pass_;
  std::vector<at::Tensor> banks_;   // the train rows' normalised features per bank (unless streamed)
  std::vector<at::Tensor> labels_;  // their labels per fraction
};

}  // namespace embcache
