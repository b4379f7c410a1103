// RAII handles over the HDF5 C API; every call is checked and failures become IoError/InputError
// carrying the operation, the object path and HDF5's own innermost error message.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace embcache::h5 {

// Move-only owner of one hid_t; closing never throws.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset();
  // Gives up ownership without closing (for closes whose status must be checked).
  hid_t release() {
    const hid_t id = id_;
    id_ = -1;
    return id;
  }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// Typed handles: what kind of object an hid_t names, in its C++ type. The functions below take
// these (or the views after them), so a dataset cannot be passed where a group is meant.
template <class Kind>
class Typed : public Handle {
 public:
  Typed() = default;
  explicit Typed(Handle handle) : Handle(std::move(handle)) {}
};
using File = Typed<struct FileKind>;
using Group = Typed<struct GroupKind>;
using Dataset = Typed<struct DatasetKind>;
using Dataspace = Typed<struct DataspaceKind>;
using PropertyList = Typed<struct PropertyListKind>;
using Datatype = Typed<struct DatatypeKind>;

// A view of an open handle of one of `Kinds`, for parameters that accept several kinds.
template <class... Kinds>
class Ref {
 public:
  template <class Kind, class = std::enable_if_t<(std::is_same_v<Kind, Kinds> || ...)>>
  Ref(const Typed<Kind>& handle) : id_(handle.get()) {}  // NOLINT: implicit by design
  hid_t get() const { return id_; }

 private:
  hid_t id_;
};
using Location = Ref<FileKind, GroupKind>;                // where groups and datasets are linked
using Object = Ref<FileKind, GroupKind, DatasetKind>;     // what carries attributes

// A datatype argument: one embcache made (a Datatype) or one of HDF5's predefined types, which
// are never closed: native<T>() in memory, little_endian<T>() in files.
class Type {
 public:
  Type(const Datatype& type) : id_(type.get()) {}  // NOLINT: implicit by design
  hid_t get() const { return id_; }

 private:
  explicit Type(hid_t id) : id_(id) {}
  template <class T>
  friend Type native();
  template <class T>
  friend Type little_endian();
  hid_t id_;
};
// Defined for float, double, std::int8_t, std::uint8_t, std::int16_t, std::uint16_t,
// std::int32_t, std::int64_t and std::uint64_t (native) and float, std::int8_t, std::uint8_t,
// std::int32_t, std::int64_t and std::uint64_t (little_endian).
template <class T>
Type native();
template <class T>
Type little_endian();

// HDF5 prints its error stack to stderr by default; embcache reports errors itself. The setting
// is per thread in the thread-safe build, so every thread that calls HDF5 calls this first.
void silence_errors_on_this_thread();

// The innermost message of HDF5's error stack on this thread ("" when empty).
std::string last_error_message();
[[noreturn]] void fail(const std::string& what, const std::string& object);

// HDF5's version as this build was compiled against ("1.10.8") and as the library loaded says.
std::string version_built();
std::string version_running();

// Files
File open_file(const std::string& path, bool writable);
File create_file(const std::string& path);  // truncates; the 1.8 format
// A file for virtual datasets (a cache's view, format 3): the 1.10 format, which they need.
File create_view_file(const std::string& path);
void flush(const File& file, const std::string& path);
bool is_hdf5(const std::string& path);
// Closes `file` and checks the close: a full disk shows up here as often as in writes. Every
// object opened in the file must be closed first.
void close_file(File& file, const std::string& path);
// The file's descriptor (for fallocate, writeback hints), or -1 when its driver has none.
int file_descriptor(const File& file);

// Links, groups, datasets
bool exists(Location loc, const std::string& path);  // checks each component of a/b/c
// The names of the links in group `path` of `loc`, in name order.
std::vector<std::string> link_names(Location loc, const std::string& path);
Group open_group(Location loc, const std::string& path);
Group create_group(Location loc, const std::string& path);  // with missing parents
Dataset open_dataset(Location loc, const std::string& path);
// `where` names the dataset in errors ("cache.h5:/levels/2"). Without a creation property list:
// contiguous, HDF5's defaults.
Dataset create_dataset(Location loc, const std::string& name, Type type, const Dataspace& space,
                       const PropertyList& create_plist, const std::string& where);
Dataset create_dataset(Location loc, const std::string& name, Type type, const Dataspace& space,
                       const std::string& where);
// The bytes of chunk cache an open dataset has (HDF5's default unless it was opened with another).
std::int64_t chunk_cache_bytes(const Dataset& dataset, const std::string& path);
// Opens a dataset that is read one row (index along dimension 0) at a time, with a chunk cache
// that holds every chunk one row touches, up to `max_cache_bytes`. A chunk that spans several
// rows is then read and decompressed once, not once per row (HDF5's default cache is 1 MiB, and
// 8 MiB from HDF5 2: a dataset whose row needs no more keeps it).
// Returns the bytes the chunks of one row take in `*row_chunk_bytes` (0: not chunked, or one
// row per chunk, which needs no cache). HDF5 keeps the cache of the first opening while a dataset
// is open, so the caller must not hold it open already.
Dataset open_dataset_for_rows(Location loc, const std::string& path, std::int64_t max_cache_bytes,
                              std::int64_t* row_chunk_bytes = nullptr);
std::vector<hsize_t> dataset_dims(const Dataset& dataset, const std::string& path);
Datatype dataset_type(const Dataset& dataset, const std::string& path);
PropertyList dataset_create_plist(const Dataset& dataset, const std::string& path);
std::int64_t storage_size(const Dataset& dataset);
void set_extent(const Dataset& dataset, const std::vector<hsize_t>& dims, const std::string& path);
// Writes a dataset whole from `data` (nothing for an empty one), or reads it whole into `data`.
void write_whole(const Dataset& dataset, Type mem_type, const void* data, const std::string& path);
void read_whole(const Dataset& dataset, Type mem_type, void* data, const std::string& path);

// A virtual dataset (VDS) of `rows` rows of `row_shape`, each mapping a run of rows of a
// dataset in another file. `fill` (type's size in bytes, or empty: HDF5's default) is what
// readers get where a source file is missing.
struct VirtualSource {
  std::string file;       // as HDF5 should open it: relative paths are relative to the view file
  std::string dataset;    // path inside it
  hsize_t source_rows = 0;  // rows of that dataset
  hsize_t source_start = 0, view_start = 0, count = 0;
};
Dataset create_virtual_dataset(Location loc, const std::string& name, Type type, const std::vector<hsize_t>& row_shape,
                               hsize_t rows, const std::vector<VirtualSource>& sources,
                               const std::vector<std::uint8_t>& fill, const std::string& where);
// Copies every attribute of one object to another.
void copy_attributes(Object from, Object to, const std::string& where);
// A small contiguous dataset written whole: strings, or int64 of `dims`.
void write_string_dataset(Location loc, const std::string& name, const std::vector<std::string>& values,
                          const std::string& where);
void write_int64_dataset(Location loc, const std::string& name, const std::vector<hsize_t>& dims,
                         const std::vector<std::int64_t>& values, const std::string& where);

// Dataspaces
Dataspace simple_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& maxdims, const std::string& path);
Dataspace scalar_space();

// Dataset creation properties: chunking, then filters in the order they are added.
PropertyList chunked_create_plist(const std::vector<hsize_t>& chunk);
void add_shuffle(const PropertyList& create_plist);
void add_deflate(const PropertyList& create_plist, unsigned level);
void add_filter(const PropertyList& create_plist, H5Z_filter_t filter, const std::vector<unsigned>& values,
                const std::string& name);
void add_fletcher32(const PropertyList& create_plist);
bool filter_available(H5Z_filter_t filter);
struct ChunkLayout {
  bool chunked = false;
  std::vector<hsize_t> chunk;          // one extent per dimension (chunked only)
  std::vector<H5Z_filter_t> filters;   // in pipeline order
};
ChunkLayout chunk_layout(const Dataset& dataset, const std::string& path);

// Chunks as stored (direct chunk I/O: the caller does what the filters would).
void write_chunk(const Dataset& dataset, const std::vector<hsize_t>& offset, std::size_t bytes, const void* data,
                 const std::string& path);
// Reads the stored chunk at `offset` into `out`, which holds `bytes`. False (HDF5's error stack
// cleared) when the chunk is not stored, was stored through a filter the mask says was skipped,
// or (HDF5 2) its stored size is not `bytes`: then read it the normal way.
bool read_plain_chunk(const Dataset& dataset, const std::vector<hsize_t>& offset, void* out, std::size_t bytes);
struct ChunkLocation {
  haddr_t address = HADDR_UNDEF;  // byte offset in the file
  hsize_t size = 0;               // stored bytes
  unsigned filter_mask = 0;       // filters skipped for this chunk (0: all applied)
};
ChunkLocation chunk_location(const Dataset& dataset, const std::vector<hsize_t>& offset, const std::string& path);

// Types
Datatype copy_type(Type type);
Datatype float16_type();   // IEEE half, read by h5py as numpy float16
Datatype bfloat16_type();  // bfloat16 as a custom 16-bit float; h5py reads it with .astype('f4')
Datatype vlen_utf8_type();
struct TypeInfo {
  H5T_class_t type_class = H5T_NO_CLASS;
  std::size_t size = 0;
  bool is_signed = false;        // integers
  bool variable_string = false;  // strings
};
TypeInfo type_info(Type type);
bool is_float16(Type type);
bool is_bfloat16(Type type);
std::string describe_type(Type type);

// Row-wise I/O along dimension 0 of a dataset (every other dimension whole).
void write_rows(const Dataset& dataset, Type mem_type, hsize_t start, hsize_t count, const void* data,
                const std::string& path);
void read_rows(const Dataset& dataset, Type mem_type, hsize_t start, hsize_t count, void* data,
               const std::string& path);
// Grows dimension 0 by `count` and writes the rows at the end.
void append_rows(const Dataset& dataset, Type mem_type, hsize_t count, const void* data, const std::string& path);
void append_strings(const Dataset& dataset, const std::vector<std::string>& values, const std::string& path);
std::vector<std::string> read_strings(const Dataset& dataset, hsize_t start, hsize_t count, const std::string& path);

// Attributes (replaced if present)
void write_attr(Object loc, const std::string& name, const std::string& value);
void write_attr(Object loc, const std::string& name, std::int64_t value);
void write_attr(Object loc, const std::string& name, const std::vector<std::int64_t>& values);
bool has_attr(Object loc, const std::string& name);
std::optional<std::string> read_attr_string(Object loc, const std::string& name);
std::optional<std::int64_t> read_attr_int(Object loc, const std::string& name);

}  // namespace embcache::h5
