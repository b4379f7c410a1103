#include "embcache/h5/h5.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "embcache/core/error.hpp"

namespace embcache::h5 {

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = -1;
  }
  return *this;
}

void Handle::reset() {
  if (id_ >= 0 && closer_ != nullptr) closer_(id_);
  id_ = -1;
}

void silence_errors_on_this_thread() {
  thread_local bool silenced = false;
  if (!silenced) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    silenced = true;
  }
}

namespace {

herr_t collect_innermost(unsigned, const H5E_error2_t* entry, void* out) {
  auto* message = static_cast<std::string*>(out);
  if (entry->desc != nullptr && entry->desc[0] != '\0') *message = entry->desc;
  return 0;
}

}  // namespace

std::string last_error_message() {
  std::string message;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_innermost, &message);
  // Low-level I/O errors carry a long multi-line record; the OS reason is the useful part.
  const std::string marker = "error message = '";
  const auto at = message.find(marker);
  if (at != std::string::npos) {
    const auto end = message.find('\'', at + marker.size());
    message = message.substr(at + marker.size(), end == std::string::npos ? std::string::npos : end - at - marker.size());
  }
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return message;
}

void fail(const std::string& what, const std::string& object) {
  std::string message = what + " " + object;
  const std::string detail = last_error_message();
  if (!detail.empty()) message += " (HDF5: " + detail + ")";
  H5Eclear2(H5E_DEFAULT);
  throw IoError(message);
}

namespace {

hid_t check(hid_t id, const char* what, const std::string& object) {
  if (id < 0) fail(what, object);
  return id;
}

void check_status(herr_t status, const char* what, const std::string& object) {
  if (status < 0) fail(what, object);
}

}  // namespace

template <>
Type native<float>() { return Type(H5T_NATIVE_FLOAT); }
template <>
Type native<double>() { return Type(H5T_NATIVE_DOUBLE); }
template <>
Type native<std::int8_t>() { return Type(H5T_NATIVE_INT8); }
template <>
Type native<std::uint8_t>() { return Type(H5T_NATIVE_UINT8); }
template <>
Type native<std::int16_t>() { return Type(H5T_NATIVE_INT16); }
template <>
Type native<std::uint16_t>() { return Type(H5T_NATIVE_UINT16); }
template <>
Type native<std::int32_t>() { return Type(H5T_NATIVE_INT32); }
template <>
Type native<std::int64_t>() { return Type(H5T_NATIVE_INT64); }
template <>
Type native<std::uint64_t>() { return Type(H5T_NATIVE_UINT64); }
template <>
Type little_endian<float>() { return Type(H5T_IEEE_F32LE); }
template <>
Type little_endian<std::int8_t>() { return Type(H5T_STD_I8LE); }
template <>
Type little_endian<std::uint8_t>() { return Type(H5T_STD_U8LE); }
template <>
Type little_endian<std::int32_t>() { return Type(H5T_STD_I32LE); }
template <>
Type little_endian<std::int64_t>() { return Type(H5T_STD_I64LE); }
template <>
Type little_endian<std::uint64_t>() { return Type(H5T_STD_U64LE); }

std::string version_built() {
  return std::to_string(H5_VERS_MAJOR) + "." + std::to_string(H5_VERS_MINOR) + "." + std::to_string(H5_VERS_RELEASE);
}

std::string version_running() {
  unsigned major = 0, minor = 0, release = 0;
  check_status(H5get_libversion(&major, &minor, &release), "cannot get the version of", "the HDF5 library");
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

File open_file(const std::string& path, bool writable) {
  silence_errors_on_this_thread();
  const hid_t id = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  return File(Handle(check(id, "cannot open HDF5 file", path), H5Fclose));
}

File create_file(const std::string& path) {
  silence_errors_on_this_thread();
  Handle fapl(check(H5Pcreate(H5P_FILE_ACCESS), "cannot create file access list for", path),
              H5Pclose);
  // The 1.8 file format keeps the file readable by every h5py/HDF5 still in use.
  check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_EARLIEST, H5F_LIBVER_V18),
               "cannot set format bounds for", path);
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  return File(Handle(check(id, "cannot create HDF5 file", path), H5Fclose));
}

File create_view_file(const std::string& path) {
  silence_errors_on_this_thread();
  Handle fapl(check(H5Pcreate(H5P_FILE_ACCESS), "cannot create file access list for", path), H5Pclose);
  check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_EARLIEST, H5F_LIBVER_V110), "cannot set format bounds for", path);
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  return File(Handle(check(id, "cannot create HDF5 file", path), H5Fclose));
}

Dataset create_virtual_dataset(Location loc, const std::string& name, Type type, const std::vector<hsize_t>& row_shape,
                               hsize_t rows, const std::vector<VirtualSource>& sources,
                               const std::vector<std::uint8_t>& fill, const std::string& where) {
  std::vector<hsize_t> dims{rows};
  dims.insert(dims.end(), row_shape.begin(), row_shape.end());
  const Dataspace view_space = simple_space(dims, {}, where);
  PropertyList dcpl(Handle(check(H5Pcreate(H5P_DATASET_CREATE), "cannot create properties for", where), H5Pclose));
  if (!fill.empty()) check_status(H5Pset_fill_value(dcpl.get(), type.get(), fill.data()), "cannot set the fill value of", where);
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  for (const VirtualSource& source : sources) {
    if (source.count == 0) continue;
    count[0] = source.count;
    start[0] = source.view_start;
    check_status(H5Sselect_hyperslab(view_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
                 "cannot select rows of", where);
    std::vector<hsize_t> source_dims = dims;
    source_dims[0] = source.source_rows;
    const Dataspace source_space = simple_space(source_dims, {}, where);
    start[0] = source.source_start;
    check_status(H5Sselect_hyperslab(source_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
                 "cannot select rows of", source.file + ":/" + source.dataset);
    check_status(H5Pset_virtual(dcpl.get(), view_space.get(), source.file.c_str(), source.dataset.c_str(),
                                source_space.get()),
                 "cannot map rows into", where);
  }
  check_status(H5Sselect_all(view_space.get()), "cannot select", where);
  return create_dataset(loc, name, type, view_space, dcpl, where);
}

namespace {

struct AttributeCopy {
  hid_t to;
  const std::string* where;
};

herr_t copy_one_attribute(hid_t from, const char* name, const H5A_info_t*, void* data) {
  const auto& copy = *static_cast<AttributeCopy*>(data);
  const Handle attr(check(H5Aopen(from, name, H5P_DEFAULT), "cannot open attribute of", *copy.where), H5Aclose);
  const Handle type(check(H5Aget_type(attr.get()), "cannot get the type of an attribute of", *copy.where), H5Tclose);
  const Handle space(check(H5Aget_space(attr.get()), "cannot get the shape of an attribute of", *copy.where), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  const std::size_t size = H5Tget_size(type.get());
  const bool vlen = H5Tis_variable_str(type.get()) > 0;
  std::vector<std::uint8_t> buffer(std::size_t(std::max<hssize_t>(n, 1)) * size);
  check_status(H5Aread(attr.get(), type.get(), buffer.data()), "cannot read an attribute of", *copy.where);
  if (H5Aexists(copy.to, name) > 0) H5Adelete(copy.to, name);
  const Handle out(check(H5Acreate2(copy.to, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         "cannot create an attribute of", *copy.where),
                   H5Aclose);
  check_status(H5Awrite(out.get(), type.get(), buffer.data()), "cannot write an attribute of", *copy.where);
  if (vlen) H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, buffer.data());
  return 0;
}

}  // namespace

void copy_attributes(Object from, Object to, const std::string& where) {
  AttributeCopy copy{to.get(), &where};
  hsize_t index = 0;
  check_status(H5Aiterate2(from.get(), H5_INDEX_NAME, H5_ITER_NATIVE, &index, copy_one_attribute, &copy),
               "cannot copy the attributes of", where);
}

void write_string_dataset(Location loc, const std::string& name, const std::vector<std::string>& values,
                          const std::string& where) {
  const Datatype type = vlen_utf8_type();
  const Dataspace space = simple_space({hsize_t(values.size())}, {}, where);
  const Dataset ds = create_dataset(loc, name, type, space, where);
  std::vector<const char*> pointers;
  for (const auto& v : values) pointers.push_back(v.c_str());
  write_whole(ds, type, pointers.data(), where);
}

void write_int64_dataset(Location loc, const std::string& name, const std::vector<hsize_t>& dims,
                         const std::vector<std::int64_t>& values, const std::string& where) {
  const Dataspace space = simple_space(dims, {}, where);
  const Dataset ds = create_dataset(loc, name, little_endian<std::int64_t>(), space, where);
  write_whole(ds, native<std::int64_t>(), values.data(), where);
}

void close_file(File& file, const std::string& path) {
  check_status(H5Fclose(file.release()), "cannot close", path);
}

int file_descriptor(const File& file) {
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file.get(), H5P_DEFAULT, &handle) < 0 || handle == nullptr) {
    H5Eclear2(H5E_DEFAULT);
    return -1;
  }
  return *static_cast<int*>(handle);
}

void flush(const File& file, const std::string& path) {
  check_status(H5Fflush(file.get(), H5F_SCOPE_LOCAL), "cannot flush", path);
}

namespace {

// Whether the file holds HDF5's signature where a superblock may start (0, 512, 1024, ...).
// IoError when it cannot be read; false when it is missing.
bool has_hdf5_signature(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    throw IoError(path + ": cannot open it (" + std::strerror(errno) + ")");
  }
  static const char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  bool found = false;
  for (off_t at = 0;; at = at == 0 ? 512 : 2 * at) {
    char bytes[8];
    const ssize_t n = ::pread(fd, bytes, sizeof bytes, at);
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      if (saved == EISDIR) return false;
      throw IoError(path + ": cannot read it (" + std::strerror(saved) + ")");
    }
    if (n < ssize_t(sizeof bytes)) break;
    if (std::memcmp(bytes, kSignature, sizeof bytes) == 0) {
      found = true;
      break;
    }
  }
  ::close(fd);
  return found;
}

}  // namespace

bool is_hdf5(const std::string& path) {
  silence_errors_on_this_thread();
  const htri_t result = H5Fis_hdf5(path.c_str());
  const std::string detail = result < 0 ? last_error_message() : "";
  H5Eclear2(H5E_DEFAULT);
  if (result >= 0) return result > 0;
  // HDF5 could not tell. A missing file, or one that is not HDF5, is not; an HDF5 file it could
  // not read is an I/O error, never "not an HDF5 file" (a user might delete it for that).
  if (has_hdf5_signature(path)) {
    throw IoError(path + ": HDF5 could not read this HDF5 file (" + (detail.empty() ? "no reason given" : detail) +
                  "); an I/O error? Nothing was changed; try again");
  }
  return false;
}

bool exists(Location loc, const std::string& path) {
  std::size_t pos = 0;
  while (true) {
    const auto slash = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, slash);
    const htri_t found = H5Lexists(loc.get(), prefix.c_str(), H5P_DEFAULT);
    if (found <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) return true;
    pos = slash;
  }
}

Group open_group(Location loc, const std::string& path) {
  return Group(Handle(check(H5Gopen2(loc.get(), path.c_str(), H5P_DEFAULT), "cannot open group", path), H5Gclose));
}

Group create_group(Location loc, const std::string& path) {
  Handle lcpl(check(H5Pcreate(H5P_LINK_CREATE), "cannot create link properties for", path), H5Pclose);
  check_status(H5Pset_create_intermediate_group(lcpl.get(), 1), "cannot set intermediate groups for", path);
  return Group(Handle(check(H5Gcreate2(loc.get(), path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), "cannot create group", path),
                      H5Gclose));
}

Dataset open_dataset(Location loc, const std::string& path) {
  return Dataset(Handle(check(H5Dopen2(loc.get(), path.c_str(), H5P_DEFAULT), "cannot open dataset", path), H5Dclose));
}

namespace {

Dataset create(Location loc, const std::string& name, Type type, const Dataspace& space, hid_t create_plist,
               const std::string& where) {
  return Dataset(Handle(check(H5Dcreate2(loc.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, create_plist,
                                         H5P_DEFAULT),
                              "cannot create dataset", where),
                        H5Dclose));
}

}  // namespace

Dataset create_dataset(Location loc, const std::string& name, Type type, const Dataspace& space,
                       const PropertyList& create_plist, const std::string& where) {
  return create(loc, name, type, space, create_plist.get(), where);
}

Dataset create_dataset(Location loc, const std::string& name, Type type, const Dataspace& space,
                       const std::string& where) {
  return create(loc, name, type, space, H5P_DEFAULT, where);
}

std::vector<std::string> link_names(Location loc, const std::string& path) {
  const Group group = open_group(loc, path);
  H5G_info_t info;
  check_status(H5Gget_info(group.get(), &info), "cannot list", path);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size = H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (size < 0) fail("cannot list", path);
    std::string name(std::size_t(size), '\0');
    if (H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT) < 0) {
      fail("cannot list", path);
    }
    names.push_back(name);
  }
  return names;
}

namespace {

std::int64_t next_prime(std::int64_t n) {
  const auto is_prime = [](std::int64_t k) {
    if (k < 2) return false;
    for (std::int64_t d = 2; d * d <= k; ++d) {
      if (k % d == 0) return false;
    }
    return true;
  };
  while (!is_prime(n)) ++n;
  return n;
}

}  // namespace

std::int64_t chunk_cache_bytes(const Dataset& dataset, const std::string& path) {
  Handle dapl(check(H5Dget_access_plist(dataset.get()), "cannot read the access properties of", path), H5Pclose);
  std::size_t slots = 0, bytes = 0;
  double w0 = 0;
  check_status(H5Pget_chunk_cache(dapl.get(), &slots, &bytes, &w0), "cannot read the chunk cache of", path);
  return std::int64_t(bytes);
}

Dataset open_dataset_for_rows(Location loc, const std::string& path, std::int64_t max_cache_bytes,
                              std::int64_t* row_chunk_bytes) {
  if (row_chunk_bytes) *row_chunk_bytes = 0;
  Dataset dataset = open_dataset(loc, path);
  const ChunkLayout layout = chunk_layout(dataset, path);
  if (!layout.chunked) return dataset;
  const std::vector<hsize_t> dims = dataset_dims(dataset, path);
  const std::vector<hsize_t>& chunk = layout.chunk;
  if (dims.empty() || chunk.size() != dims.size() || chunk[0] <= 1) return dataset;
  std::int64_t chunk_bytes = std::int64_t(type_info(dataset_type(dataset, path)).size);
  std::int64_t chunks_per_row = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    chunk_bytes *= std::int64_t(chunk[d]);
    if (d > 0) chunks_per_row *= std::int64_t((dims[d] + chunk[d] - 1) / chunk[d]);
  }
  const std::int64_t needed = chunks_per_row * chunk_bytes;
  if (row_chunk_bytes) *row_chunk_bytes = needed;
  const std::int64_t default_bytes = chunk_cache_bytes(dataset, path);
  std::int64_t cache_bytes = std::min(needed + chunk_bytes, std::max(max_cache_bytes, default_bytes));
  if (layout.filters.empty() && chunks_per_row == 1) {
    // Unfiltered chunks of whole rows: HDF5 reads the rows asked for straight into the caller's
    // buffer from a chunk it does not cache, in one read per chunk. Cached, every byte would be
    // read into a chunk buffer (fresh memory for each chunk loaded) and copied again.
    cache_bytes = 0;
  } else if (needed <= default_bytes) {
    return dataset;
  }
  // HDF5 advises a prime number of hash slots, about 100 times the chunks the cache holds.
  const std::int64_t slots = next_prime(std::min<std::int64_t>(100 * (cache_bytes / chunk_bytes + 1), 1000003));
  Handle dapl(check(H5Pcreate(H5P_DATASET_ACCESS), "cannot create access properties for", path), H5Pclose);
  check_status(H5Pset_chunk_cache(dapl.get(), std::size_t(slots), std::size_t(cache_bytes),
                                  H5D_CHUNK_CACHE_W0_DEFAULT),
               "cannot size the chunk cache of", path);
  dataset.reset();
  return Dataset(Handle(check(H5Dopen2(loc.get(), path.c_str(), dapl.get()), "cannot open dataset", path), H5Dclose));
}

std::vector<hsize_t> dataset_dims(const Dataset& dataset, const std::string& path) {
  Handle space(check(H5Dget_space(dataset.get()), "cannot get dataspace of", path), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail("cannot get rank of", path);
  std::vector<hsize_t> dims(std::size_t(rank), 0);
  if (rank > 0) check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "cannot get dimensions of", path);
  return dims;
}

Datatype dataset_type(const Dataset& dataset, const std::string& path) {
  return Datatype(Handle(check(H5Dget_type(dataset.get()), "cannot get type of", path), H5Tclose));
}

PropertyList dataset_create_plist(const Dataset& dataset, const std::string& path) {
  return PropertyList(Handle(check(H5Dget_create_plist(dataset.get()), "cannot get creation properties of", path), H5Pclose));
}

void set_extent(const Dataset& dataset, const std::vector<hsize_t>& dims, const std::string& path) {
  check_status(H5Dset_extent(dataset.get(), dims.data()), "cannot extend", path);
}

void write_whole(const Dataset& dataset, Type mem_type, const void* data, const std::string& path) {
  hsize_t total = 1;
  for (auto d : dataset_dims(dataset, path)) total *= d;
  if (total == 0) return;
  check_status(H5Dwrite(dataset.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "cannot write", path);
}

void read_whole(const Dataset& dataset, Type mem_type, void* data, const std::string& path) {
  hsize_t total = 1;
  for (auto d : dataset_dims(dataset, path)) total *= d;
  if (total == 0) return;
  check_status(H5Dread(dataset.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "cannot read", path);
}

Dataspace simple_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& maxdims, const std::string& path) {
  return Dataspace(Handle(check(H5Screate_simple(int(dims.size()), dims.data(), maxdims.empty() ? nullptr : maxdims.data()),
                                "cannot create a dataspace for", path),
                          H5Sclose));
}

Dataspace scalar_space() {
  return Dataspace(Handle(check(H5Screate(H5S_SCALAR), "cannot create", "a scalar dataspace"), H5Sclose));
}

PropertyList chunked_create_plist(const std::vector<hsize_t>& chunk) {
  PropertyList dcpl(Handle(check(H5Pcreate(H5P_DATASET_CREATE), "cannot create", "dataset properties"), H5Pclose));
  check_status(H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data()), "cannot set chunking", "");
  return dcpl;
}

void add_shuffle(const PropertyList& create_plist) { check_status(H5Pset_shuffle(create_plist.get()), "cannot set", "shuffle"); }

void add_deflate(const PropertyList& create_plist, unsigned level) {
  check_status(H5Pset_deflate(create_plist.get(), level), "cannot set", "gzip");
}

void add_filter(const PropertyList& create_plist, H5Z_filter_t filter, const std::vector<unsigned>& values,
                const std::string& name) {
  check_status(H5Pset_filter(create_plist.get(), filter, H5Z_FLAG_MANDATORY, values.size(), values.data()), "cannot set", name);
}

void add_fletcher32(const PropertyList& create_plist) { check_status(H5Pset_fletcher32(create_plist.get()), "cannot set", "fletcher32"); }

bool filter_available(H5Z_filter_t filter) {
  const htri_t available = H5Zfilter_avail(filter);
  H5Eclear2(H5E_DEFAULT);
  return available > 0;
}

ChunkLayout chunk_layout(const Dataset& dataset, const std::string& path) {
  const PropertyList dcpl = dataset_create_plist(dataset, path);
  ChunkLayout layout;
  const H5D_layout_t kind = H5Pget_layout(dcpl.get());
  if (kind < 0) fail("cannot get the layout of", path);
  layout.chunked = kind == H5D_CHUNKED;
  if (!layout.chunked) return layout;
  const int rank = int(dataset_dims(dataset, path).size());
  layout.chunk.assign(std::size_t(rank), 0);
  if (H5Pget_chunk(dcpl.get(), rank, layout.chunk.data()) != rank) fail("cannot get the chunk shape of", path);
  const int filters = H5Pget_nfilters(dcpl.get());
  if (filters < 0) fail("cannot count the filters of", path);
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0;
    std::size_t values = 0;
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), unsigned(i), &flags, &values, nullptr, 0, nullptr, nullptr);
    if (id < 0) fail("cannot read the filters of", path);
    layout.filters.push_back(id);
  }
  return layout;
}

void write_chunk(const Dataset& dataset, const std::vector<hsize_t>& offset, std::size_t bytes, const void* data,
                 const std::string& path) {
  check_status(H5Dwrite_chunk(dataset.get(), H5P_DEFAULT, 0, offset.data(), bytes, data), "cannot write a chunk of", path);
}

bool read_plain_chunk(const Dataset& dataset, const std::vector<hsize_t>& offset, void* out, std::size_t bytes) {
  std::uint32_t filter_mask = 0;
#if H5_VERSION_GE(2, 0, 0)
  // HDF5 2 reads a chunk only into a buffer it is told is large enough, and says its stored size.
  std::size_t stored = bytes;
  const bool read = H5Dread_chunk2(dataset.get(), H5P_DEFAULT, offset.data(), &filter_mask, out, &stored) >= 0 &&
                    stored == bytes;
#else
  (void)bytes;  // HDF5 1 reads the whole stored chunk; the caller's layout says it is `bytes`
  const bool read = H5Dread_chunk(dataset.get(), H5P_DEFAULT, offset.data(), &filter_mask, out) >= 0;
#endif
  if (!read || filter_mask != 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  return true;
}

ChunkLocation chunk_location(const Dataset& dataset, const std::vector<hsize_t>& offset, const std::string& path) {
  ChunkLocation location;
  check_status(H5Dget_chunk_info_by_coord(dataset.get(), offset.data(), &location.filter_mask, &location.address, &location.size),
               "cannot locate a chunk of", path);
  return location;
}

std::int64_t storage_size(const Dataset& dataset) { return std::int64_t(H5Dget_storage_size(dataset.get())); }

Datatype copy_type(Type type) {
  return Datatype(Handle(check(H5Tcopy(type.get()), "cannot copy type", ""), H5Tclose));
}

TypeInfo type_info(Type of) {
  const hid_t type = of.get();
  TypeInfo info;
  info.type_class = H5Tget_class(type);
  if (info.type_class == H5T_NO_CLASS) fail("cannot get the class of", "a datatype");
  info.size = H5Tget_size(type);
  if (info.size == 0) fail("cannot get the size of", "a datatype");
  if (info.type_class == H5T_INTEGER) {
    const H5T_sign_t sign = H5Tget_sign(type);
    if (sign == H5T_SGN_ERROR) fail("cannot get the sign of", "a datatype");
    info.is_signed = sign == H5T_SGN_2;
  }
  if (info.type_class == H5T_STRING) {
    const htri_t variable = H5Tis_variable_str(type);
    if (variable < 0) fail("cannot tell the string kind of", "a datatype");
    info.variable_string = variable > 0;
  }
  return info;
}

Datatype float16_type() {
  Datatype t = copy_type(little_endian<float>());
  check_status(H5Tset_fields(t.get(), 15, 10, 5, 0, 10), "cannot build", "float16 type");
  check_status(H5Tset_size(t.get(), 2), "cannot build", "float16 type");
  check_status(H5Tset_ebias(t.get(), 15), "cannot build", "float16 type");
  return t;
}

Datatype bfloat16_type() {
  Datatype t = copy_type(little_endian<float>());
  check_status(H5Tset_fields(t.get(), 15, 7, 8, 0, 7), "cannot build", "bfloat16 type");
  check_status(H5Tset_size(t.get(), 2), "cannot build", "bfloat16 type");
  check_status(H5Tset_ebias(t.get(), 127), "cannot build", "bfloat16 type");
  return t;
}

Datatype vlen_utf8_type() {
  Datatype t(Handle(check(H5Tcopy(H5T_C_S1), "cannot copy type", ""), H5Tclose));
  check_status(H5Tset_size(t.get(), H5T_VARIABLE), "cannot build", "string type");
  check_status(H5Tset_cset(t.get(), H5T_CSET_UTF8), "cannot build", "string type");
  return t;
}

namespace {

bool float_layout_is(hid_t type, std::size_t size, std::size_t ebits, std::size_t mbits) {
  if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != size) return false;
  std::size_t spos, epos, esize, mpos, msize;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  return esize == ebits && msize == mbits;
}

}  // namespace

bool is_float16(Type type) { return float_layout_is(type.get(), 2, 5, 10); }
bool is_bfloat16(Type type) { return float_layout_is(type.get(), 2, 8, 7); }

std::string describe_type(Type type) {
  const TypeInfo info = type_info(type);
  if (info.type_class == H5T_FLOAT) {
    if (is_float16(type)) return "float16";
    if (is_bfloat16(type)) return "bfloat16";
    return "float" + std::to_string(8 * info.size);
  }
  if (info.type_class == H5T_INTEGER) return std::string(info.is_signed ? "int" : "uint") + std::to_string(8 * info.size);
  if (info.type_class == H5T_STRING) return "string";
  return "class " + std::to_string(int(info.type_class));
}

namespace {

// Fixed-width C strings of `width` bytes, to read fixed-length string data into.
Datatype fixed_string_type(std::size_t width, const std::string& what) {
  Datatype t(Handle(check(H5Tcopy(H5T_C_S1), "cannot copy type", ""), H5Tclose));
  check_status(H5Tset_size(t.get(), width), "cannot build a string type for", what);
  return t;
}

Handle row_selection(const Dataset& dataset, hsize_t start, hsize_t count, const std::string& path,
                     Handle* mem_space) {
  Handle space(check(H5Dget_space(dataset.get()), "cannot get dataspace of", path), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 1) fail("cannot get rows of", path);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "cannot get dimensions of", path);
  if (start + count > dims[0]) {
    throw IoError("rows " + std::to_string(start) + ".." + std::to_string(start + count) +
                  " are outside " + path + " (" + std::to_string(dims[0]) + " rows)");
  }
  std::vector<hsize_t> offset(std::size_t(rank), 0);
  offset[0] = start;
  std::vector<hsize_t> extent = dims;
  extent[0] = count;
  check_status(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, offset.data(), nullptr,
                                   extent.data(), nullptr),
               "cannot select rows of", path);
  *mem_space = Handle(check(H5Screate_simple(rank, extent.data(), nullptr),
                            "cannot create memory space for", path),
                      H5Sclose);
  return space;
}

}  // namespace

void write_rows(const Dataset& dataset, Type mem_type, hsize_t start, hsize_t count, const void* data,
                const std::string& path) {
  if (count == 0) return;
  Handle mem_space;
  Handle file_space = row_selection(dataset, start, count, path, &mem_space);
  check_status(H5Dwrite(dataset.get(), mem_type.get(), mem_space.get(), file_space.get(), H5P_DEFAULT, data),
               "cannot write rows to", path);
}

void read_rows(const Dataset& dataset, Type mem_type, hsize_t start, hsize_t count, void* data,
               const std::string& path) {
  if (count == 0) return;
  Handle mem_space;
  Handle file_space = row_selection(dataset, start, count, path, &mem_space);
  check_status(H5Dread(dataset.get(), mem_type.get(), mem_space.get(), file_space.get(), H5P_DEFAULT, data),
               "cannot read rows of", path);
}

void append_rows(const Dataset& dataset, Type mem_type, hsize_t count, const void* data,
                 const std::string& path) {
  if (count == 0) return;
  std::vector<hsize_t> dims = dataset_dims(dataset, path);
  const hsize_t start = dims[0];
  dims[0] += count;
  set_extent(dataset, dims, path);
  write_rows(dataset, mem_type, start, count, data, path);
}

void append_strings(const Dataset& dataset, const std::vector<std::string>& values,
                    const std::string& path) {
  std::vector<const char*> pointers;
  pointers.reserve(values.size());
  for (const auto& v : values) pointers.push_back(v.c_str());
  const Datatype type = vlen_utf8_type();
  append_rows(dataset, type, values.size(), pointers.data(), path);
}

std::vector<std::string> read_strings(const Dataset& dataset, hsize_t start, hsize_t count,
                                      const std::string& path) {
  std::vector<std::string> values;
  if (count == 0) return values;
  const Datatype file_type = dataset_type(dataset, path);
  const TypeInfo info = type_info(file_type);
  if (info.type_class != H5T_STRING) {
    throw InputError(path + ": expected strings, found " + describe_type(file_type));
  }
  values.reserve(count);
  if (info.variable_string) {
    const Datatype mem_type = vlen_utf8_type();
    std::vector<char*> pointers(count, nullptr);
    read_rows(dataset, mem_type, start, count, pointers.data(), path);
    for (char* p : pointers) values.emplace_back(p != nullptr ? p : "");
    const Dataspace mem_space = simple_space({count}, {}, path);
    check_status(H5Dvlen_reclaim(mem_type.get(), mem_space.get(), H5P_DEFAULT, pointers.data()), "cannot free strings of", path);
  } else {
    const std::size_t width = info.size;
    const Datatype mem_type = fixed_string_type(width, path);
    std::vector<char> buffer(width * count);
    read_rows(dataset, mem_type, start, count, buffer.data(), path);
    for (hsize_t i = 0; i < count; ++i) {
      const char* p = buffer.data() + i * width;
      values.emplace_back(p, strnlen(p, width));
    }
  }
  return values;
}

namespace {

void replace_attr(Object loc, const std::string& name, hid_t type, hid_t space, const void* data) {
  if (has_attr(loc, name)) check_status(H5Adelete(loc.get(), name.c_str()), "cannot replace attribute", name);
  Handle attr(check(H5Acreate2(loc.get(), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute", name),
              H5Aclose);
  check_status(H5Awrite(attr.get(), type, data), "cannot write attribute", name);
}

}  // namespace

void write_attr(Object loc, const std::string& name, const std::string& value) {
  const Datatype type = vlen_utf8_type();
  const Dataspace space = scalar_space();
  const char* p = value.c_str();
  replace_attr(loc, name, type.get(), space.get(), &p);
}

void write_attr(Object loc, const std::string& name, std::int64_t value) {
  const Dataspace space = scalar_space();
  replace_attr(loc, name, H5T_NATIVE_INT64, space.get(), &value);
}

void write_attr(Object loc, const std::string& name, const std::vector<std::int64_t>& values) {
  const Dataspace space = simple_space({hsize_t(values.size())}, {}, name);
  replace_attr(loc, name, H5T_NATIVE_INT64, space.get(), values.data());
}

bool has_attr(Object loc, const std::string& name) {
  const htri_t found = H5Aexists(loc.get(), name.c_str());
  if (found < 0) fail("cannot look up attribute", name);
  return found > 0;
}

std::optional<std::string> read_attr_string(Object loc, const std::string& name) {
  if (!has_attr(loc, name)) return std::nullopt;
  Handle attr(check(H5Aopen(loc.get(), name.c_str(), H5P_DEFAULT), "cannot open attribute", name),
              H5Aclose);
  const Datatype type(Handle(check(H5Aget_type(attr.get()), "cannot get the type of attribute", name), H5Tclose));
  const TypeInfo info = type_info(type);
  if (info.type_class != H5T_STRING) return std::nullopt;
  if (info.variable_string) {
    const Datatype mem_type = vlen_utf8_type();
    char* p = nullptr;
    check_status(H5Aread(attr.get(), mem_type.get(), &p), "cannot read attribute", name);
    std::string value = p != nullptr ? p : "";
    H5free_memory(p);
    return value;
  }
  const std::size_t width = info.size;
  std::string buffer(width, '\0');
  const Datatype mem_type = fixed_string_type(width, "attribute " + name);
  check_status(H5Aread(attr.get(), mem_type.get(), buffer.data()), "cannot read attribute", name);
  buffer.resize(strnlen(buffer.data(), width));
  return buffer;
}

std::optional<std::int64_t> read_attr_int(Object loc, const std::string& name) {
  if (!has_attr(loc, name)) return std::nullopt;
  Handle attr(check(H5Aopen(loc.get(), name.c_str(), H5P_DEFAULT), "cannot open attribute", name),
              H5Aclose);
  const Datatype type(Handle(check(H5Aget_type(attr.get()), "cannot get the type of attribute", name), H5Tclose));
  if (type_info(type).type_class != H5T_INTEGER) return std::nullopt;
  std::int64_t value = 0;
  check_status(H5Aread(attr.get(), H5T_NATIVE_INT64, &value), "cannot read attribute", name);
  return value;
}

}  // namespace embcache::h5
