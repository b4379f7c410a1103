#include "embcache/probe/knn.hpp"

#include <ATen/ATen.h>
#include <torch/script.h>

#include <algorithm>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"

namespace embcache {

at::Tensor l2_normalize(const at::Tensor& x) { return x / x.norm(2, {1}, true).clamp_min(1e-12); }

KnnNeighbours::KnnNeighbours(at::Tensor queries, std::int64_t k_max) : queries_(std::move(queries)), k_max_(k_max) {}

void KnnNeighbours::add(const at::Tensor& bank, const at::Tensor& labels) {
  if (bank.size(0) == 0) return;
  // The block's own k_max nearest first, then a merge with the running ones: nothing of the
  // block's size is concatenated or gathered.
  const at::Tensor similarity = at::mm(queries_, bank.t());  // [m, b]
  const auto block = at::topk(similarity, std::min<std::int64_t>(k_max_, similarity.size(1)), 1, true, true);
  const at::Tensor& index = std::get<1>(block);
  at::Tensor block_labels = labels.to(queries_.device()).index_select(0, index.flatten()).view(index.sizes());
  if (!similarity_.defined()) {
    similarity_ = std::get<0>(block);
    labels_ = block_labels;
  } else {
    const at::Tensor both = at::cat({similarity_, std::get<0>(block)}, 1);
    const auto top = at::topk(both, std::min<std::int64_t>(k_max_, both.size(1)), 1, true, true);
    similarity_ = std::get<0>(top);
    labels_ = at::cat({labels_, block_labels}, 1).gather(1, std::get<1>(top));
  }
  seen_ += bank.size(0);
}

at::Tensor KnnNeighbours::scores(std::int64_t k, std::int64_t classes, double temperature) const {
  const at::Tensor weights = (similarity_.narrow(1, 0, k) / temperature).exp();
  return at::zeros({queries_.size(0), classes}, weights.options()).scatter_add_(1, labels_.narrow(1, 0, k), weights);
}

void save_knn_head(const std::string& path, const at::Tensor& bank, const at::Tensor& labels, std::int64_t k,
                   std::int64_t classes, double temperature) {
  torch::jit::Module m("EmbcacheKnnHead");
  m.register_buffer("bank", bank.to(at::kCPU).contiguous());
  m.register_buffer("labels", labels.to(at::kCPU, at::kLong).contiguous());
  m.define(R"(
def forward(self, feats: List[Tensor]) -> Tensor:
    parts: List[Tensor] = []
    for x in feats:
        if x.dim() == 4:
            x = x.mean([2, 3])
        parts.append(x)
    z = torch.cat(parts, 1)
    z = z / z.norm(2, [1], True).clamp_min(1e-12)
    top = torch.topk(torch.mm(z, self.bank.t()), )" + std::to_string(k) + R"(, 1)
    w = torch.exp(top[0] / )" + exact_number_text(temperature) + R"()
    out = torch.zeros([z.size(0), )" + std::to_string(classes) + R"(], dtype=w.dtype, device=w.device)
    return out.scatter_add(1, self.labels[top[1]], w)
)");
  m.eval();
  try {
    m.save(path);
  } catch (const c10::Error& e) {
    throw IoError(path + ": cannot write the head (" + first_line(e.what_without_backtrace()) + ")");
  }
}

}  // namespace embcache
