#include "embcache/h5/h5.hpp"

#include <algorithm>
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

hid_t check(hid_t id, const char* what, const std::string& object) {
  if (id < 0) fail(what, object);
  return id;
}

void check_status(herr_t status, const char* what, const std::string& object) {
  if (status < 0) fail(what, object);
}

Handle open_file(const std::string& path, bool writable) {
  silence_errors_on_this_thread();
  const hid_t id = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  return Handle(check(id, "cannot open HDF5 file", path), H5Fclose);
}

Handle create_file(const std::string& path) {
  silence_errors_on_this_thread();
  Handle fapl(check(H5Pcreate(H5P_FILE_ACCESS), "cannot create file access list for", path),
              H5Pclose);
  // The 1.8 file format keeps the file readable by every h5py/HDF5 still in use.
  check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_EARLIEST, H5F_LIBVER_V18),
               "cannot set format bounds for", path);
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  return Handle(check(id, "cannot create HDF5 file", path), H5Fclose);
}

void flush(hid_t file, const std::string& path) {
  check_status(H5Fflush(file, H5F_SCOPE_LOCAL), "cannot flush", path);
}

bool is_hdf5(const std::string& path) {
  silence_errors_on_this_thread();
  const htri_t result = H5Fis_hdf5(path.c_str());
  H5Eclear2(H5E_DEFAULT);
  return result > 0;
}

bool exists(hid_t loc, const std::string& path) {
  std::size_t pos = 0;
  while (true) {
    const auto slash = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, slash);
    const htri_t found = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (found <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) return true;
    pos = slash;
  }
}

Handle open_group(hid_t loc, const std::string& path) {
  return Handle(check(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), "cannot open group", path),
                H5Gclose);
}

Handle create_group(hid_t loc, const std::string& path) {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return Handle(check(H5Gcreate2(loc, path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
                      "cannot create group", path),
                H5Gclose);
}

Handle open_dataset(hid_t loc, const std::string& path) {
  return Handle(check(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), "cannot open dataset", path),
                H5Dclose);
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

Handle open_dataset_for_rows(hid_t loc, const std::string& path, std::int64_t max_cache_bytes,
                             std::int64_t* row_chunk_bytes) {
  if (row_chunk_bytes) *row_chunk_bytes = 0;
  Handle dataset = open_dataset(loc, path);
  Handle dcpl = dataset_create_plist(dataset.get(), path);
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return dataset;
  const std::vector<hsize_t> dims = dataset_dims(dataset.get(), path);
  std::vector<hsize_t> chunk(dims.size(), 1);
  if (dims.empty() || H5Pget_chunk(dcpl.get(), int(chunk.size()), chunk.data()) != int(dims.size())) {
    return dataset;
  }
  if (chunk[0] <= 1) return dataset;
  Handle type = dataset_type(dataset.get(), path);
  std::int64_t chunk_bytes = std::int64_t(H5Tget_size(type.get()));
  std::int64_t chunks_per_row = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    chunk_bytes *= std::int64_t(chunk[d]);
    if (d > 0) chunks_per_row *= std::int64_t((dims[d] + chunk[d] - 1) / chunk[d]);
  }
  const std::int64_t needed = chunks_per_row * chunk_bytes;
  if (row_chunk_bytes) *row_chunk_bytes = needed;
  constexpr std::int64_t kDefaultCacheBytes = 1 << 20;  // HDF5's rdcc_nbytes default
  if (needed <= kDefaultCacheBytes) return dataset;
  const std::int64_t cache_bytes = std::min(needed + chunk_bytes, std::max(max_cache_bytes, kDefaultCacheBytes));
  // HDF5 advises a prime number of hash slots, about 100 times the chunks the cache holds.
  const std::int64_t slots = next_prime(std::min<std::int64_t>(100 * (cache_bytes / chunk_bytes + 1), 1000003));
  Handle dapl(check(H5Pcreate(H5P_DATASET_ACCESS), "cannot create access properties for", path), H5Pclose);
  check_status(H5Pset_chunk_cache(dapl.get(), std::size_t(slots), std::size_t(cache_bytes),
                                  H5D_CHUNK_CACHE_W0_DEFAULT),
               "cannot size the chunk cache of", path);
  dataset.reset();
  return Handle(check(H5Dopen2(loc, path.c_str(), dapl.get()), "cannot open dataset", path), H5Dclose);
}

std::vector<hsize_t> dataset_dims(hid_t dataset, const std::string& path) {
  Handle space(check(H5Dget_space(dataset), "cannot get dataspace of", path), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail("cannot get rank of", path);
  std::vector<hsize_t> dims(std::size_t(rank), 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

Handle dataset_type(hid_t dataset, const std::string& path) {
  return Handle(check(H5Dget_type(dataset), "cannot get type of", path), H5Tclose);
}

Handle dataset_create_plist(hid_t dataset, const std::string& path) {
  return Handle(check(H5Dget_create_plist(dataset), "cannot get creation properties of", path),
                H5Pclose);
}

std::int64_t storage_size(hid_t dataset) { return std::int64_t(H5Dget_storage_size(dataset)); }

Handle copy_type(hid_t type) {
  return Handle(check(H5Tcopy(type), "cannot copy type", ""), H5Tclose);
}

Handle float16_type() {
  Handle t = copy_type(H5T_IEEE_F32LE);
  check_status(H5Tset_fields(t.get(), 15, 10, 5, 0, 10), "cannot build", "float16 type");
  check_status(H5Tset_size(t.get(), 2), "cannot build", "float16 type");
  check_status(H5Tset_ebias(t.get(), 15), "cannot build", "float16 type");
  return t;
}

Handle bfloat16_type() {
  Handle t = copy_type(H5T_IEEE_F32LE);
  check_status(H5Tset_fields(t.get(), 15, 7, 8, 0, 7), "cannot build", "bfloat16 type");
  check_status(H5Tset_size(t.get(), 2), "cannot build", "bfloat16 type");
  check_status(H5Tset_ebias(t.get(), 127), "cannot build", "bfloat16 type");
  return t;
}

Handle vlen_utf8_type() {
  Handle t = copy_type(H5T_C_S1);
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

bool is_float16(hid_t type) { return float_layout_is(type, 2, 5, 10); }
bool is_bfloat16(hid_t type) { return float_layout_is(type, 2, 8, 7); }

std::string describe_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (is_float16(type)) return "float16";
    if (is_bfloat16(type)) return "bfloat16";
    return "float" + std::to_string(8 * size);
  }
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    return std::string(is_signed ? "int" : "uint") + std::to_string(8 * size);
  }
  if (cls == H5T_STRING) return "string";
  return "class " + std::to_string(int(cls));
}

namespace {

Handle row_selection(hid_t dataset, hsize_t start, hsize_t count, const std::string& path,
                     Handle* mem_space) {
  Handle space(check(H5Dget_space(dataset), "cannot get dataspace of", path), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
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

void write_rows(hid_t dataset, hid_t mem_type, hsize_t start, hsize_t count, const void* data,
                const std::string& path) {
  if (count == 0) return;
  Handle mem_space;
  Handle file_space = row_selection(dataset, start, count, path, &mem_space);
  check_status(H5Dwrite(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data),
               "cannot write rows to", path);
}

void read_rows(hid_t dataset, hid_t mem_type, hsize_t start, hsize_t count, void* data,
               const std::string& path) {
  if (count == 0) return;
  Handle mem_space;
  Handle file_space = row_selection(dataset, start, count, path, &mem_space);
  check_status(H5Dread(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data),
               "cannot read rows of", path);
}

void append_rows(hid_t dataset, hid_t mem_type, hsize_t count, const void* data,
                 const std::string& path) {
  if (count == 0) return;
  std::vector<hsize_t> dims = dataset_dims(dataset, path);
  const hsize_t start = dims[0];
  dims[0] += count;
  check_status(H5Dset_extent(dataset, dims.data()), "cannot extend", path);
  write_rows(dataset, mem_type, start, count, data, path);
}

void append_strings(hid_t dataset, const std::vector<std::string>& values,
                    const std::string& path) {
  std::vector<const char*> pointers;
  pointers.reserve(values.size());
  for (const auto& v : values) pointers.push_back(v.c_str());
  Handle type = vlen_utf8_type();
  append_rows(dataset, type.get(), values.size(), pointers.data(), path);
}

std::vector<std::string> read_strings(hid_t dataset, hsize_t start, hsize_t count,
                                      const std::string& path) {
  std::vector<std::string> values;
  if (count == 0) return values;
  Handle file_type = dataset_type(dataset, path);
  if (H5Tget_class(file_type.get()) != H5T_STRING) {
    throw InputError(path + ": expected strings, found " + describe_type(file_type.get()));
  }
  values.reserve(count);
  if (H5Tis_variable_str(file_type.get()) > 0) {
    Handle mem_type = vlen_utf8_type();
    std::vector<char*> pointers(count, nullptr);
    read_rows(dataset, mem_type.get(), start, count, pointers.data(), path);
    for (char* p : pointers) values.emplace_back(p != nullptr ? p : "");
    Handle mem_space(H5Screate_simple(1, &count, nullptr), H5Sclose);
    H5Dvlen_reclaim(mem_type.get(), mem_space.get(), H5P_DEFAULT, pointers.data());
  } else {
    const std::size_t width = H5Tget_size(file_type.get());
    Handle mem_type = copy_type(H5T_C_S1);
    H5Tset_size(mem_type.get(), width);
    std::vector<char> buffer(width * count);
    read_rows(dataset, mem_type.get(), start, count, buffer.data(), path);
    for (hsize_t i = 0; i < count; ++i) {
      const char* p = buffer.data() + i * width;
      values.emplace_back(p, strnlen(p, width));
    }
  }
  return values;
}

namespace {

void replace_attr(hid_t loc, const std::string& name, hid_t type, hid_t space, const void* data) {
  if (H5Aexists(loc, name.c_str()) > 0) H5Adelete(loc, name.c_str());
  Handle attr(check(H5Acreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute", name),
              H5Aclose);
  check_status(H5Awrite(attr.get(), type, data), "cannot write attribute", name);
}

}  // namespace

void write_attr(hid_t loc, const std::string& name, const std::string& value) {
  Handle type = vlen_utf8_type();
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const char* p = value.c_str();
  replace_attr(loc, name, type.get(), space.get(), &p);
}

void write_attr(hid_t loc, const std::string& name, std::int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  replace_attr(loc, name, H5T_NATIVE_INT64, space.get(), &value);
}

void write_attr(hid_t loc, const std::string& name, const std::vector<std::int64_t>& values) {
  const hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  replace_attr(loc, name, H5T_NATIVE_INT64, space.get(), values.data());
}

bool has_attr(hid_t loc, const std::string& name) { return H5Aexists(loc, name.c_str()) > 0; }

std::optional<std::string> read_attr_string(hid_t loc, const std::string& name) {
  if (!has_attr(loc, name)) return std::nullopt;
  Handle attr(check(H5Aopen(loc, name.c_str(), H5P_DEFAULT), "cannot open attribute", name),
              H5Aclose);
  Handle type(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) return std::nullopt;
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle mem_type = vlen_utf8_type();
    char* p = nullptr;
    check_status(H5Aread(attr.get(), mem_type.get(), &p), "cannot read attribute", name);
    std::string value = p != nullptr ? p : "";
    H5free_memory(p);
    return value;
  }
  const std::size_t width = H5Tget_size(type.get());
  std::string buffer(width, '\0');
  Handle mem_type = copy_type(H5T_C_S1);
  H5Tset_size(mem_type.get(), width);
  check_status(H5Aread(attr.get(), mem_type.get(), buffer.data()), "cannot read attribute", name);
  buffer.resize(strnlen(buffer.data(), width));
  return buffer;
}

std::optional<std::int64_t> read_attr_int(hid_t loc, const std::string& name) {
  if (!has_attr(loc, name)) return std::nullopt;
  Handle attr(check(H5Aopen(loc, name.c_str(), H5P_DEFAULT), "cannot open attribute", name),
              H5Aclose);
  Handle type(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) return std::nullopt;
  std::int64_t value = 0;
  check_status(H5Aread(attr.get(), H5T_NATIVE_INT64, &value), "cannot read attribute", name);
  return value;
}

}  // namespace embcache::h5
