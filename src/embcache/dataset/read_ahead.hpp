// A WindowSource that reads the next windows ahead, in parallel, in the order the pipeline asks
// for them: for sources whose reads may run on several threads at once (rslearn's GDAL reads,
// each opening its own files), never for HDF5-backed ones (HDF5 is not concurrent).
#pragma once

#include <cstddef>
#include <future>
#include <map>
#include <memory>

#include "embcache/dataset/window_source.hpp"

namespace embcache {

class ReadAheadSource : public WindowSource {
 public:
  // Keeps up to 2 x `threads` windows in flight. std::logic_error when `inner` does not allow
  // concurrent reads.
  ReadAheadSource(std::unique_ptr<WindowSource> inner, int threads);
  ~ReadAheadSource() override;

  const std::vector<WindowInfo>& windows() const override { return inner_->windows(); }
  std::int64_t channels() const override { return inner_->channels(); }
  std::int64_t time_steps() const override { return inner_->time_steps(); }
  LabelKinds label_kinds() const override { return inner_->label_kinds(); }
  std::string describe() const override { return inner_->describe(); }
  std::vector<std::pair<std::string, std::int64_t>> skipped() const override { return inner_->skipped(); }
  nlohmann::json signature_fields() const override { return inner_->signature_fields(); }
  bool concurrent_reads() const override { return false; }  // its own read() is for one thread

  // The window, read ahead if it was asked for before; a caller that skips ahead drops the
  // windows it skipped. An error of a read is thrown when its window is asked for.
  WindowData read(std::size_t index) override;

 private:
  std::unique_ptr<WindowSource> inner_;
  std::size_t depth_;
  std::map<std::size_t, std::future<WindowData>> ahead_;
};

}  // namespace embcache
