#include "embcache/store/storage_options.hpp"

#include <algorithm>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"

namespace embcache {
namespace {

constexpr H5Z_filter_t kLz4Filter = 32004;
constexpr H5Z_filter_t kBloscFilter = 32001;
constexpr unsigned kBloscZstd = 5;

void require_filter(H5Z_filter_t id, const std::string& name, const std::string& package) {
  if (!h5::filter_available(id)) {
    throw UsageError(OptionName{"compression"}, "the HDF5 filter plugin for " + name + " is not installed; "
                     "install the Debian package " + package + " or use gzip/none");
  }
}

}  // namespace

const EnumTable<StorageDtype>& storage_dtypes() {
  static const EnumTable<StorageDtype> table{{StorageDtype::kFloat32, "float32"},
                                             {StorageDtype::kFloat16, "float16"},
                                             {StorageDtype::kBFloat16, "bfloat16"},
                                             {StorageDtype::kInt8, "int8"}};
  return table;
}

std::string to_string(StorageDtype dtype) { return storage_dtypes().name(dtype); }

at::ScalarType torch_type(StorageDtype dtype) {
  switch (dtype) {
    case StorageDtype::kFloat16: return at::kHalf;
    case StorageDtype::kBFloat16: return at::kBFloat16;
    case StorageDtype::kInt8: return at::kChar;
    default: return at::kFloat;
  }
}

h5::Datatype hdf5_type(StorageDtype dtype) {
  switch (dtype) {
    case StorageDtype::kFloat16: return h5::float16_type();
    case StorageDtype::kBFloat16: return h5::bfloat16_type();
    case StorageDtype::kInt8: return h5::copy_type(h5::little_endian<std::int8_t>());
    default: return h5::copy_type(h5::little_endian<float>());
  }
}

std::size_t element_size(StorageDtype dtype) {
  switch (dtype) {
    case StorageDtype::kFloat32: return 4;
    case StorageDtype::kInt8: return 1;
    default: return 2;
  }
}

Compression Compression::parse(const std::string& text) {
  Compression c;
  if (text == "none") return c;
  if (text == "lz4") {
    c.kind = Kind::kLz4;
    return c;
  }
  if (text == "blosc-zstd") {
    c.kind = Kind::kBloscZstd;
    return c;
  }
  if (text.rfind("gzip", 0) == 0) {
    c.kind = Kind::kGzip;
    if (text.size() > 4) {
      if (text[4] != ':') throw UsageError(OptionName{"compression"}, "expected gzip or gzip:LEVEL, got \"" + text + "\"");
      c.level = int(parse_int(text.substr(5), {"compression"}));
      if (c.level < 0 || c.level > 9) throw UsageError(OptionName{"compression"}, "gzip level must be 0-9");
    }
    return c;
  }
  throw UsageError(OptionName{"compression"}, "expected none, gzip[:LEVEL], lz4 or blosc-zstd, got \"" + text + "\"");
}

std::string Compression::to_string() const {
  switch (kind) {
    case Kind::kNone: return "none";
    case Kind::kGzip: return "gzip:" + std::to_string(level);
    case Kind::kLz4: return "lz4";
    case Kind::kBloscZstd: return "blosc-zstd";
  }
  return "?";
}

std::vector<hsize_t> chunk_shape(const std::vector<std::int64_t>& row_shape, std::size_t elem_size) {
  std::size_t row_bytes = elem_size;
  for (auto d : row_shape) row_bytes *= std::size_t(std::max<std::int64_t>(d, 1));
  std::vector<hsize_t> chunk{1};
  for (auto d : row_shape) chunk.push_back(hsize_t(std::max<std::int64_t>(d, 1)));
  if (row_bytes <= kMaxChunkBytes) {
    chunk[0] = hsize_t(std::max<std::size_t>(1, kTargetChunkBytes / row_bytes));
  } else if (!row_shape.empty()) {
    // One row is bigger than a chunk may be: split channels so each chunk holds part of one row.
    const std::size_t per_channel = row_bytes / std::size_t(std::max<std::int64_t>(row_shape[0], 1));
    chunk[1] = hsize_t(std::max<std::size_t>(1, kTargetChunkBytes / std::max<std::size_t>(per_channel, 1)));
  }
  return chunk;
}

h5::PropertyList feature_create_plist(const std::vector<hsize_t>& chunk, const StorageOptions& options) {
  h5::PropertyList dcpl = h5::chunked_create_plist(chunk);
  switch (options.compression.kind) {
    case Compression::Kind::kNone: break;
    case Compression::Kind::kGzip:
      h5::add_shuffle(dcpl);
      h5::add_deflate(dcpl, unsigned(options.compression.level));
      break;
    case Compression::Kind::kLz4:
      require_filter(kLz4Filter, "lz4", "hdf5-filter-plugin");
      h5::add_filter(dcpl, kLz4Filter, {}, "lz4");
      break;
    case Compression::Kind::kBloscZstd: {
      require_filter(kBloscFilter, "blosc-zstd", "hdf5-filter-plugin-blosc-serial");
      // cd_values 0-3 are filled in by the filter; then level, shuffle (1 = byte), compressor.
      h5::add_filter(dcpl, kBloscFilter, {0, 0, 0, 0, 1, 1, kBloscZstd}, "blosc");
      break;
    }
  }
  if (options.checksum) h5::add_fletcher32(dcpl);
  return dcpl;
}

h5::PropertyList column_create_plist(const std::vector<hsize_t>& chunk, bool checksum) {
  StorageOptions plain;
  plain.checksum = checksum;
  return feature_create_plist(chunk, plain);
}

}  // namespace embcache
