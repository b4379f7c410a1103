#include "embcache/dataset/array_dataset.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "embcache/core/error.hpp"
#include "embcache/core/limits.hpp"
#include "embcache/host/tensor_recycler.hpp"
#include "embcache/h5/h5.hpp"

namespace embcache {
namespace {

struct PixelType {
  h5::Type (*mem_type)();  // the memory type pixels are read into
  at::ScalarType scalar;
};

// uint16 has no torch dtype in 1.13: HDF5 widens it to int32 exactly.
std::optional<PixelType> pixel_type_for(h5::Type file_type) {
  const h5::TypeInfo info = h5::type_info(file_type);
  const H5T_class_t cls = info.type_class;
  const std::size_t size = info.size;
  const bool is_signed = info.is_signed;
  if (cls == H5T_INTEGER) {
    if (size == 1 && !is_signed) return PixelType{h5::native<std::uint8_t>, at::kByte};
    if (size == 2 && is_signed) return PixelType{h5::native<std::int16_t>, at::kShort};
    if (size == 2 && !is_signed) return PixelType{h5::native<std::int32_t>, at::kInt};
    if (size == 4 && is_signed) return PixelType{h5::native<std::int32_t>, at::kInt};
  }
  if (cls == H5T_FLOAT && size == 4 && !h5::is_float16(file_type)) {
    return PixelType{h5::native<float>, at::kFloat};
  }
  return std::nullopt;
}

class ArrayDataset final : public WindowSource {
 public:
  explicit ArrayDataset(const std::string& path) : path_(path) {
    if (std::filesystem::is_directory(path)) {
      throw InputError(path + ": is a directory but not an rslearn dataset (no windows/ inside); pass an "
                              "rslearn dataset root or an array dataset file (docs/dataset-formats.md)");
    }
    if (!h5::is_hdf5(path)) {
      throw InputError(path + ": not an HDF5 file (or missing); expected an array dataset "
                              "with /images [N, C, H, W] (see docs/dataset-formats.md)");
    }
    file_ = h5::open_file(path, false);
    open_images();
    const std::size_t n = std::size_t(dims_[0]);
    auto names = read_string_column("names", n);
    auto groups = read_string_column("groups", n);
    auto splits = read_string_column("splits", n);
    windows_.resize(n);
    std::unordered_map<std::string, std::size_t> seen;
    for (std::size_t i = 0; i < n; ++i) {
      WindowInfo& w = windows_[i];
      w.name = names ? (*names)[i] : "w" + std::to_string(i);
      w.group = groups ? (*groups)[i] : "default";
      w.split = splits ? (*splits)[i] : "train";
      w.bounds = {0, 0, std::int64_t(dims_[3]), std::int64_t(dims_[2])};
      if (w.name.empty()) throw InputError(path + ": /names row " + std::to_string(i) + " is empty");
      const auto [it, inserted] = seen.emplace(w.group + '\0' + w.name, i);
      if (!inserted) {
        throw InputError(path + ": /names rows " + std::to_string(it->second) + " and " +
                         std::to_string(i) + " are both \"" + w.name + "\" in group \"" +
                         w.group + "\"; window names must be unique within a group");
      }
    }
    open_labels();
    open_masks();
  }

  const std::vector<WindowInfo>& windows() const override { return windows_; }
  std::int64_t channels() const override { return std::int64_t(dims_[1]); }
  std::int64_t time_steps() const override { return time_steps_; }
  LabelKinds label_kinds() const override { return kinds_; }
  std::string describe() const override {
    return path_ + " (array dataset, " + std::to_string(windows_.size()) + " windows, " +
           (time_steps_ > 0 ? std::to_string(time_steps_) + "x" : "") + std::to_string(dims_[1]) + "x" + std::to_string(dims_[2]) + "x" +
           std::to_string(dims_[3]) + " " + pixel_type_name_ + ")";
  }

  // Sequential reads come from blocks of rows read in one call per dataset: row by row, the HDF5
  // calls would cost more than copying the pixels of small windows. A window is copied out of its
  // block, so that what the later
  // stages keep (a crop's mask, a float crop passed through unchanged) holds its own row and not
  // the whole block. A read that does not follow the previous one reads its row alone, so a
  // sparse selection of windows (a shard, only the new windows) reads nothing it does not use.
  WindowData read(std::size_t index) override {
    const std::int64_t row = std::int64_t(index);
    if (row < block_.start || row >= block_.start + block_.rows) {
      const bool sequential = row == block_.start + block_.rows;
      read_block(row, sequential ? std::min(rows_per_block(), std::int64_t(dims_[0]) - row) : 1);
    }
    const std::int64_t i = row - block_.start;
    WindowData data;
    data.pixels = row_of(block_.pixels, i);
    if (kinds_.has_class) data.label_class = class_ids_[index];
    if (kinds_.has_value) data.label_value = row_of(block_.values, i);
    if (kinds_.has_mask) data.mask = row_of(block_.mask, i);
    return data;
  }

 private:
  // A chunk shared by several blocks stays cached until its rows are read, up to this many bytes
  // per dataset (docs/dataset-formats.md).
  static constexpr std::int64_t kRowChunkCacheBytes = std::int64_t(256) << 20;
  // A block holds at most this many bytes of pixels and masks (and at least one row).
  static constexpr std::int64_t kBlockBytes = std::int64_t(4) << 20;

  // Rows [start, start + rows) of the file's per-pixel and value datasets (class ids are read
  // whole when the file is opened, to validate them, and kept).
  struct Block {
    std::int64_t start = 0, rows = 0;
    at::Tensor pixels;  // [rows, (T,) C, H, W]
    at::Tensor values;  // [rows] or [rows, K] with value labels
    at::Tensor mask;    // [rows, H, W] with masks
  };

  // A copy of row i of `rows` (contiguous): one allocation and a memcpy, cheaper than ATen's
  // indexing and copy for rows of a few hundred bytes.
  static at::Tensor row_of(const at::Tensor& rows, std::int64_t i) {
    at::Tensor row = at::empty(rows.sizes().slice(1), rows.options());
    const std::size_t bytes = row.nbytes();
    std::memcpy(row.data_ptr(), static_cast<const char*>(rows.data_ptr()) + std::size_t(i) * bytes, bytes);
    return row;
  }

  std::int64_t rows_per_block() const {
    std::int64_t row_bytes = at::elementSize(pixel_.scalar) * std::max<std::int64_t>(time_steps_, 1);
    for (std::size_t d = 1; d < dims_.size(); ++d) row_bytes *= std::int64_t(dims_[d]);
    if (kinds_.has_mask) row_bytes += std::int64_t(sizeof(std::int32_t) * dims_[2] * dims_[3]);
    return std::max<std::int64_t>(1, kBlockBytes / row_bytes);
  }

  // Into the memory of the block before, which its rows were copied out of (TensorRecycler says
  // why): the block before is let go first.
  void read_block(std::int64_t start, std::int64_t rows) {
    block_ = Block{};
    Block b;
    b.start = start;
    b.rows = rows;
    std::vector<std::int64_t> shape{rows, std::int64_t(dims_[1]), std::int64_t(dims_[2]), std::int64_t(dims_[3])};
    if (time_steps_ > 0) shape.insert(shape.begin() + 1, time_steps_);
    b.pixels = pixel_blocks_.take(shape, pixel_.scalar);
    h5::read_rows(images_, pixel_.mem_type(), hsize_t(start), hsize_t(rows), b.pixels.data_ptr(), path_ + ":/images");
    if (kinds_.has_value) {
      b.values = kinds_.value_width == 0 ? value_blocks_.take({rows}, at::kFloat)
                                         : value_blocks_.take({rows, kinds_.value_width}, at::kFloat);
      h5::read_rows(labels_, h5::native<float>(), hsize_t(start), hsize_t(rows), b.values.data_ptr(), path_ + ":/labels");
    }
    if (kinds_.has_mask) {
      b.mask = mask_blocks_.take({rows, std::int64_t(dims_[2]), std::int64_t(dims_[3])}, at::kInt);
      h5::read_rows(masks_, h5::native<std::int32_t>(), hsize_t(start), hsize_t(rows), b.mask.data_ptr(), path_ + ":/masks");
    }
    block_ = std::move(b);
  }

  void open_images() {
    if (!h5::exists(file_, "images")) {
      throw InputError(path_ + ": missing dataset /images; an array dataset stores windows as "
                               "/images [N, C, H, W] (see docs/dataset-formats.md)");
    }
    images_ = h5::open_dataset_for_rows(file_, "images", kRowChunkCacheBytes);
    dims_ = h5::dataset_dims(images_, path_ + ":/images");
    if (dims_.size() != 4 && dims_.size() != 5) {
      throw InputError(path_ + ": /images has rank " + std::to_string(dims_.size()) +
                       "; expected [N, C, H, W] (rank 4), or [N, T, C, H, W] (rank 5) for time series");
    }
    if (dims_.size() == 5) {
      // From here on dims_ is [N, C, H, W] and the time axis is time_steps_.
      time_steps_ = std::int64_t(dims_[1]);
      dims_.erase(dims_.begin() + 1);
      if (time_steps_ == 0) throw InputError(path_ + ": /images [N, T, C, H, W] has T = 0");
    }
    if (dims_[0] == 0) throw InputError(path_ + ": no window to read (/images has 0 rows)");
    const h5::Datatype type = h5::dataset_type(images_, path_);
    pixel_type_name_ = h5::describe_type(type);
    const auto pixel = pixel_type_for(type);
    if (!pixel) {
      throw InputError(path_ + ": /images has type " + pixel_type_name_ +
                       "; supported: uint8, uint16, int16, int32, float32");
    }
    pixel_ = *pixel;
    if (dims_[1] == 0 || dims_[2] == 0 || dims_[3] == 0) {
      throw InputError(path_ + ": /images has an empty channel or spatial dimension");
    }
  }

  std::optional<std::vector<std::string>> read_string_column(const std::string& name,
                                                             std::size_t n) {
    if (!h5::exists(file_, name)) return std::nullopt;
    const h5::Dataset ds = h5::open_dataset(file_, name);
    const auto dims = h5::dataset_dims(ds, path_ + ":/" + name);
    if (dims.size() != 1 || dims[0] != n) {
      throw InputError(path_ + ": /" + name + " has shape " + shape_text(dims) + "; expected [" +
                       std::to_string(n) + "] to match /images");
    }
    return h5::read_strings(ds, 0, n, path_ + ":/" + name);
  }

  void open_labels() {
    if (!h5::exists(file_, "labels")) return;
    labels_ = h5::open_dataset(file_, "labels");
    const auto dims = h5::dataset_dims(labels_, path_ + ":/labels");
    const h5::Datatype type = h5::dataset_type(labels_, path_);
    const H5T_class_t cls = h5::type_info(type).type_class;
    if (dims.empty() || dims[0] != dims_[0] || dims.size() > 2) {
      throw InputError(path_ + ": /labels has shape " + shape_text(dims) + "; expected [" +
                       std::to_string(dims_[0]) + "] or [" + std::to_string(dims_[0]) +
                       ", K] to match /images");
    }
    if (cls == H5T_INTEGER && dims.size() == 1) {
      kinds_.has_class = true;
      // Validate class ids now: one negative id would silently poison every later metric.
      std::vector<std::int64_t>& ids = class_ids_;
      ids.resize(dims[0]);
      h5::read_rows(labels_, h5::native<std::int64_t>(), 0, dims[0], ids.data(), path_ + ":/labels");
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= kMaxClasses) {
          throw InputError(path_ + ": /labels row " + std::to_string(i) + " is " + std::to_string(ids[i]) +
                           "; class ids must be from 0 to " + std::to_string(kMaxClasses - 1));
        }
      }
    } else if (cls == H5T_FLOAT) {
      kinds_.has_value = true;
      kinds_.value_width = dims.size() == 2 ? std::int64_t(dims[1]) : 0;
    } else {
      throw InputError(path_ + ": /labels must be integer [N] (classes) or float [N] / [N, K] "
                               "(regression), found " + h5::describe_type(type) + " " +
                       shape_text(dims));
    }
  }

  void open_masks() {
    if (!h5::exists(file_, "masks")) return;
    masks_ = h5::open_dataset_for_rows(file_, "masks", kRowChunkCacheBytes);
    const auto dims = h5::dataset_dims(masks_, path_ + ":/masks");
    if (dims.size() != 3 || dims[0] != dims_[0] || dims[1] != dims_[2] || dims[2] != dims_[3]) {
      throw InputError(path_ + ": /masks has shape " + shape_text(dims) + "; expected [" +
                       std::to_string(dims_[0]) + ", " + std::to_string(dims_[2]) + ", " +
                       std::to_string(dims_[3]) + "] to match /images");
    }
    const h5::Datatype type = h5::dataset_type(masks_, path_);
    if (h5::type_info(type).type_class != H5T_INTEGER) {
      throw InputError(path_ + ": /masks must hold integer class ids, found " +
                       h5::describe_type(type));
    }
    kinds_.has_mask = true;
    kinds_.ignore_index = h5::read_attr_int(masks_, "ignore_index").value_or(-1);
  }

  static std::string shape_text(const std::vector<hsize_t>& dims) {
    std::string s = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
  }

  std::string path_;
  h5::File file_;
  h5::Dataset images_, labels_, masks_;
  std::vector<hsize_t> dims_;  // [N, C, H, W], whatever the time axis
  std::int64_t time_steps_ = 0;
  PixelType pixel_{h5::native<float>, at::kFloat};
  std::string pixel_type_name_;
  std::vector<WindowInfo> windows_;
  LabelKinds kinds_;
  std::vector<std::int64_t> class_ids_;  // /labels, with class labels
  Block block_;
  TensorRecycler pixel_blocks_{1}, value_blocks_{1}, mask_blocks_{1};
};

}  // namespace

std::unique_ptr<WindowSource> open_array_dataset(const std::string& path) {
  return std::make_unique<ArrayDataset>(path);
}

}  // namespace embcache
