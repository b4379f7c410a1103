#include "embcache/dataset/window_shard.hpp"

#include <vector>

#include "embcache/core/crop_key.hpp"

namespace embcache {
namespace {

class ShardedSource : public WindowSource {
 public:
  ShardedSource(std::unique_ptr<WindowSource> inner, const WindowFilter& filter) : inner_(std::move(inner)) {
    const auto& all = inner_->windows();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (filter.accepts(all[i])) {
        indices_.push_back(i);
        windows_.push_back(all[i]);
      }
    }
  }
  const std::vector<WindowInfo>& windows() const override { return windows_; }
  std::int64_t channels() const override { return inner_->channels(); }
  std::int64_t time_steps() const override { return inner_->time_steps(); }
  LabelKinds label_kinds() const override { return inner_->label_kinds(); }
  std::string describe() const override { return inner_->describe(); }
  WindowData read(std::size_t index) override { return inner_->read(indices_.at(index)); }
  bool concurrent_reads() const override { return inner_->concurrent_reads(); }
  std::vector<std::pair<std::string, std::int64_t>> skipped() const override { return inner_->skipped(); }
  nlohmann::json signature_fields() const override { return inner_->signature_fields(); }

 private:
  std::unique_ptr<WindowSource> inner_;
  std::vector<std::size_t> indices_;
  std::vector<WindowInfo> windows_;
};

}  // namespace

std::int64_t shard_of_window(const std::string& group, const std::string& window, std::int64_t count) {
  if (count <= 1) return 0;
  std::uint64_t z = window_key_hash(group, window);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return std::int64_t(z % std::uint64_t(count));
}

bool WindowFilter::accepts(const WindowInfo& w) const {
  if (!shard.whole() && shard_of_window(w.group, w.name, shard.count) != shard.index) return false;
  return !keep || keep(w);
}

std::unique_ptr<WindowSource> filter_windows(std::unique_ptr<WindowSource> inner, const WindowFilter& filter) {
  if (filter.everything()) return inner;
  return std::make_unique<ShardedSource>(std::move(inner), filter);
}

}  // namespace embcache
