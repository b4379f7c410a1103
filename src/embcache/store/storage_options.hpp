// How features are stored: dtype, compression filter, checksums and the chunk shape rule.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "embcache/core/enum_table.hpp"
#include "embcache/h5/h5.hpp"

namespace embcache {

// kInt8: symmetric quantisation with float32 scales beside the levels (docs/cache-format.md).
enum class StorageDtype { kFloat32, kFloat16, kBFloat16, kInt8 };

const EnumTable<StorageDtype>& storage_dtypes();  // --dtype
std::string to_string(StorageDtype dtype);  // storage_dtypes()'s name
at::ScalarType torch_type(StorageDtype dtype);
h5::Datatype hdf5_type(StorageDtype dtype);  // also the memory type: HDF5 never converts features
std::size_t element_size(StorageDtype dtype);

struct Compression {
  enum class Kind { kNone, kGzip, kLz4, kBloscZstd };
  Kind kind = Kind::kNone;
  int level = 1;
  static Compression parse(const std::string& text);  // none | gzip[:level] | lz4 | blosc-zstd
  std::string to_string() const;
};

struct StorageOptions {
  StorageDtype dtype = StorageDtype::kFloat32;
  Compression compression;
  bool checksum = true;  // fletcher32 per chunk: a corrupted chunk fails on read
  // Whole-row chunks are then written by embcache (H5Dwrite_chunk) with the fletcher32 it computes
  // itself, from row checksums made off the I/O thread; otherwise HDF5's filters do the work.
  bool own_checksums() const { return checksum && compression.kind == Compression::Kind::kNone; }
};

// Rows per chunk for rows of `row_bytes`: as many whole rows as fit in kTargetChunkBytes (at least
// one), so that reading one crop touches exactly one chunk and streaming reads stay sequential.
// Rows larger than kMaxChunkBytes are split along their first (channel) axis instead.
constexpr std::size_t kTargetChunkBytes = std::size_t(1) << 20;
constexpr std::size_t kMaxChunkBytes = std::size_t(4) << 20;
std::vector<hsize_t> chunk_shape(const std::vector<std::int64_t>& row_shape, std::size_t elem_size);

// The dataset creation property list for features: chunking, then shuffle + filter, then
// fletcher32 (last, so it checks the bytes as stored). Throws UsageError when a filter plugin is
// missing.
h5::PropertyList feature_create_plist(const std::vector<hsize_t>& chunk, const StorageOptions& options);
// For index and label columns: chunked, checksummed when `checksum` (HDF5 allows no filters on
// variable-length strings), never compressed.
h5::PropertyList column_create_plist(const std::vector<hsize_t>& chunk, bool checksum);

}  // namespace embcache
