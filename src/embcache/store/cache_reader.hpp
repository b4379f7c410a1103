// Reads a cache, whatever it is made of: one file (format 1 or 2), or a view over parts (format
// 3, cache_parts.hpp), whose rows it reads from the part files directly (not through HDF5's
// virtual datasets: direct chunk reads, and reads aligned to each part's chunks). Every part is
// checked when the cache is opened: a missing or truncated part never reads as zeros.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/cache_parts.hpp"

namespace embcache {

// Which index columns a block read needs.
struct IndexColumns {
  bool keys = true;    // group, window, bounds
  bool splits = true;
  bool hashes = true;  // pixel hashes
};

class CacheReader : public RowSource {
 public:
  // kRefuse: InputError naming the first part file that is missing or truncated. kSkip: such
  // parts are left out of rows() (missing_parts() names them): what a precompute that extends
  // the cache does, so that it computes their rows again.
  enum class MissingParts { kRefuse, kSkip };
  // `key_hashes`: parts() carries each part's key hashes (for installs).
  explicit CacheReader(std::string path, MissingParts missing = MissingParts::kRefuse, bool key_hashes = false);
  ~CacheReader() override;

  const std::string& path() const { return meta_.path(); }
  const Signature& signature() const { return meta_.signature(); }
  const std::vector<LevelSpec>& levels() const { return meta_.levels(); }
  const LabelKinds& label_kinds() const { return meta_.label_kinds(); }
  StorageOptions storage() const { return meta_.storage(); }
  std::string embcache_version() const { return meta_.embcache_version(); }
  std::optional<bool> complete() const { return meta_.complete(); }
  const std::optional<std::string>& content_id() const { return meta_.content_id(); }
  std::int64_t format() const { return format_; }
  std::int64_t rows() const override { return rows_; }

  // A view over parts (format 3), or one file.
  bool is_view() const { return view_.has_value(); }
  // The table of parts (a view), or one part standing for the file itself.
  const CacheView& parts() const { return parts_; }
  // kSkip: "FILE (missing)" / "FILE (truncated: N of M bytes)" for each part left out.
  const std::vector<std::string>& missing_parts() const { return missing_; }
  // The part files' paths, as opened (the cache file itself for a cache of one file).
  std::string part_path(std::size_t part) const;

  CacheIndex read_index() const override { return read_index(0, rows_, {}); }
  CacheIndex read_index(std::int64_t start, std::int64_t count, IndexColumns columns) const;
  RowBatch read_rows(std::int64_t start, std::int64_t count) const override;
  std::int64_t row_feature_bytes() const override { return meta_.row_feature_bytes(); }
  at::Tensor read_level(const LevelSpec& level, std::int64_t start, std::int64_t count) const;
  at::Tensor read_scales(const LevelSpec& level, std::int64_t start, std::int64_t count) const;
  at::Tensor read_masks(std::int64_t start, std::int64_t count) const;
  // Every row's /labels/class (int64 [N]) or /labels/value (float32 [N, max(1, K)]), alone.
  at::Tensor read_targets(bool classes) const;
  std::vector<std::int64_t> mask_shape() const { return meta_.mask_shape(); }
  at::Tensor read_pixel_values(std::int64_t start, std::int64_t count) const;
  std::vector<std::int64_t> pixel_value_shape() const { return meta_.pixel_value_shape(); }

  // Rows per chunk of the first part: a size for blocks of rows.
  std::int64_t chunk_rows() const;
  // The rows [first, end) of the stored chunk that holds `row`, as rows of this cache, within
  // its part's segment: reads of such ranges touch whole chunks of one part.
  std::pair<std::int64_t, std::int64_t> chunk_around(std::int64_t row) const;
  // The end of the run of consecutive rows of one part that holds `row`.
  std::int64_t run_end(std::int64_t row) const;
  // Bytes a level (and its int8 scales) takes on disk, over every part.
  std::int64_t level_storage_bytes(const LevelSpec& level) const;

 private:
  struct Piece {  // rows [view_start, view_start + count) are part rows [start, start + count)
    std::size_t part = 0;
    std::int64_t view_start = 0, start = 0, count = 0;
  };
  // The pieces that cover rows [start, start + count).
  std::vector<Piece> pieces(std::int64_t start, std::int64_t count) const;
  // An open part. At most kOpenParts stay open (least recently used closed first): HDF5 keeps
  // about 1 MiB of metadata cache per open file, so 1,000 open parts took 840 MB.
  std::shared_ptr<const CacheFileReader> part(std::size_t index) const;
  static constexpr std::size_t kOpenParts = 16;
  std::size_t segment_of(std::int64_t row) const;
  // Reads rows [start, start + count) piece by piece with `read`, joined along rows.
  template <class Read>
  at::Tensor gather(std::int64_t start, std::int64_t count, const Read& read) const;

  CacheFileReader meta_;  // the file itself: attributes, levels, labels (a view: its virtual datasets)
  std::int64_t format_ = 1;
  std::optional<CacheView> view_;
  CacheView parts_;
  std::vector<std::int64_t> view_starts_;  // per segment of parts_: its first row in this cache
  std::vector<std::string> missing_;
  std::int64_t rows_ = 0;
  std::string dir_;
  mutable std::mutex open_mutex_;
  mutable std::vector<std::pair<std::size_t, std::shared_ptr<const CacheFileReader>>> open_;  // most recent last
};

}  // namespace embcache
