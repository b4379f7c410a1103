#include "doctest_torch.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "embcache/core/error.hpp"
#include "embcache/store/background_writeback.hpp"
#include "embcache/store/cache_file_reader.hpp"
#include "embcache/store/cache_file_writer.hpp"
#include "embcache/store/file_space.hpp"
#include "embcache/store/fletcher32.hpp"
#include "embcache/h5/h5.hpp"
#include "test_support.hpp"

using namespace embcache;

TEST_SUITE_BEGIN("store");

namespace {

RowBatch make_rows(std::int64_t n, std::int64_t first, StorageDtype dtype, const at::Tensor& features) {
  RowBatch rows;
  for (std::int64_t i = 0; i < n; ++i) {
    rows.groups.push_back("g");
    rows.windows.push_back("w" + std::to_string(first + i));
    rows.splits.push_back(i % 2 ? "val" : "train");
    for (std::int64_t v : {first + i, std::int64_t(0), first + i + 4, std::int64_t(4)}) rows.bounds.push_back(v);
    rows.pixel_hashes.push_back(std::uint64_t(first + i) * 0x9E3779B97F4A7C15ULL);
  }
  rows.levels.push_back(features.to(torch_type(dtype)).contiguous());
  rows.label_class = at::arange(first, first + n, at::kLong);
  return rows;
}

Signature test_signature(StorageDtype dtype) {
  Signature s;
  s["dtype"] = to_string(dtype);
  s["levels"] = {"feat"};
  s["labels"] = {{"class", true}};
  return s;
}

LevelSpec feat_level(std::vector<std::int64_t> shape) {
  LevelSpec level;
  level.name = "feat";
  level.row_shape = std::move(shape);
  level.stride = 2;
  return level;
}

}  // namespace

TEST_CASE("stored float16 and bfloat16 are bit-identical to torch's conversion") {
  testing::TempDir dir;
  // Normal values, values that round, subnormals, overflow to inf, exact powers of two.
  at::Tensor values = at::cat({at::randn({4096}) * 8, at::tensor({0.99979f, -7.998f, 1e-6f, 6.1e-5f, 65504.f, 1e9f, -0.0f}),
                               at::rand({1024}) * 1e-7});
  const std::int64_t n = values.numel() / 8 - 1;
  values = values.slice(0, 0, n * 8).view({n, 8});
  LabelKinds labels;
  labels.has_class = true;
  for (StorageDtype dtype : {StorageDtype::kFloat16, StorageDtype::kBFloat16, StorageDtype::kFloat32}) {
    CAPTURE(to_string(dtype));
    const std::string path = dir.file(to_string(dtype) + ".h5");
    StorageOptions storage;
    storage.dtype = dtype;
    {
      CacheFileWriter writer(path, test_signature(dtype), {feat_level({8})}, labels, storage);
      writer.append(make_rows(n, 0, dtype, values));
      writer.close();
    }
    CacheFileReader reader(path);
    const RowBatch back = reader.read_rows(0, n);
    const at::Tensor expected = values.to(torch_type(dtype));
    // Compare bit patterns, not values: NaN/inf/-0 included.
    const auto bits = dtype == StorageDtype::kFloat32 ? at::kInt : at::kShort;
    REQUIRE(at::equal(back.levels[0].view(bits), expected.view(bits)));
    REQUIRE(at::equal(back.label_class, at::arange(n, at::kLong)));
    // The file type is the 16-bit float h5py understands (float16) or the bfloat16 layout.
    const h5::Dataset ds = h5::open_dataset(reader.file(), "levels/feat");
    const h5::Datatype type = h5::dataset_type(ds, path);
    REQUIRE(h5::describe_type(type) == to_string(dtype));
  }
}

TEST_CASE("cache files round-trip every column, across several appends") {
  testing::TempDir dir;
  const std::string path = dir.file("c.h5");
  const at::Tensor f1 = at::randn({5, 3, 2, 2}), f2 = at::randn({7, 3, 2, 2});
  LabelKinds labels;
  labels.has_class = true;
  StorageOptions storage;
  storage.compression = Compression::parse("gzip:4");
  {
    CacheFileWriter writer(path, test_signature(StorageDtype::kFloat32), {feat_level({3, 2, 2})}, labels, storage, 12);
    writer.append(make_rows(5, 0, StorageDtype::kFloat32, f1));
    writer.append(make_rows(7, 5, StorageDtype::kFloat32, f2));
    REQUIRE(writer.rows() == 12);
    writer.close();
  }
  CacheFileReader reader(path);
  REQUIRE(reader.rows() == 12);
  REQUIRE(reader.levels().size() == 1);
  REQUIRE(reader.levels()[0].row_shape == std::vector<std::int64_t>{3, 2, 2});
  REQUIRE(reader.levels()[0].stride == 2);
  REQUIRE(reader.storage().compression.to_string() == "gzip:4");
  const RowBatch all = reader.read_rows(0, 12);
  REQUIRE(at::equal(all.levels[0], at::cat({f1, f2})));
  const CacheIndex index = reader.read_index();
  REQUIRE(index.windows.size() == 12);
  REQUIRE(index.windows[11] == "w11");
  REQUIRE(index.splits[1] == "val");
  REQUIRE(index.bounds[4 * 11] == 11);
  REQUIRE(index.pixel_hashes[7] == 7 * 0x9E3779B97F4A7C15ULL);
}

TEST_CASE("cache files round-trip the index across the writer's index buffer (thousands of rows)") {
  // The writer gathers index columns and writes them every few thousand rows: batches of 7 rows
  // over 10000 rows cross that boundary mid-batch, and the tail is written at close.
  testing::TempDir dir;
  const std::string path = dir.file("many.h5");
  LabelKinds labels;
  labels.has_class = true;
  const std::int64_t total = 10000, batch = 7;
  {
    CacheFileWriter writer(path, test_signature(StorageDtype::kFloat32), {feat_level({2})}, labels, StorageOptions{});
    for (std::int64_t first = 0; first < total; first += batch) {
      const std::int64_t n = std::min(batch, total - first);
      writer.append(make_rows(n, first, StorageDtype::kFloat32, at::arange(first * 2, (first + n) * 2).view({n, 2}).to(at::kFloat)));
    }
    writer.close();
  }
  CacheFileReader reader(path);
  REQUIRE(reader.rows() == total);
  const CacheIndex index = reader.read_index();
  REQUIRE(index.windows.size() == std::size_t(total));
  for (std::int64_t i : {std::int64_t(0), std::int64_t(4095), std::int64_t(4096), std::int64_t(8191), total - 1}) {
    CAPTURE(i);
    CHECK(index.windows[std::size_t(i)] == "w" + std::to_string(i));
    CHECK(index.bounds[std::size_t(4 * i)] == i);
    CHECK(index.pixel_hashes[std::size_t(i)] == std::uint64_t(i) * 0x9E3779B97F4A7C15ULL);
    CHECK(reader.read_rows(i, 1).levels[0][0][1].item<float>() == float(2 * i + 1));
  }
}

TEST_CASE("chunks hold whole rows up to 1 MiB, and split huge rows by channel") {
  const auto small = chunk_shape({16, 4, 4}, 4);  // 1 KiB rows
  REQUIRE(small == std::vector<hsize_t>{1024, 16, 4, 4});
  const auto vec = chunk_shape({1280}, 2);
  REQUIRE(vec[0] == (1u << 20) / 2560);
  const auto huge = chunk_shape({1024, 64, 64}, 4);  // 16 MiB rows
  REQUIRE(huge[0] == 1);
  REQUIRE(huge[1] * 64 * 64 * 4 <= (1u << 20));
  REQUIRE(huge[2] == 64);
}

TEST_CASE("a batch is written chunk by chunk, with other HDF5 work between chunks, and row checksums combine") {
  // Full chunks with rows after them are written from the batch's memory (their checksum
  // borrows the next 4 bytes): the batch must come back unchanged.
  testing::TempDir dir;
  const std::string path = dir.file("c.h5"), other = dir.file("other.h5");
  {
    const h5::File f = h5::create_file(other);  // something else to read between chunks
    h5::write_attr(f, "x", std::int64_t(7));
  }
  LabelKinds labels;
  labels.has_class = true;
  const LevelSpec level = feat_level({64, 32, 32});  // 256 KiB rows: 4 rows per 1 MiB chunk
  const std::int64_t chunk_rows = std::int64_t(chunk_shape(level.row_shape, 4)[0]);
  REQUIRE(chunk_rows == 4);
  const at::Tensor f = at::randn({23, 64, 32, 32});
  std::int64_t calls = 0, attr = 0;
  auto between = [&] {
    ++calls;
    const h5::File o = h5::open_file(other, false);
    attr = h5::read_attr_int(o, "x").value_or(-1);
  };
  {
    CacheFileWriter writer(path, test_signature(StorageDtype::kFloat32), {level}, labels, StorageOptions{});
    std::int64_t first = 0;
    // Batches of 10, 6 and 7 rows: chunks start mid-batch; the middle batch has no row checksums.
    for (std::int64_t n : {10, 6, 7}) {
      RowBatch rows = make_rows(n, first, StorageDtype::kFloat32, f.slice(0, first, first + n).contiguous());
      if (n != 6) {
        std::vector<std::uint32_t> sums;
        for (std::int64_t r = 0; r < n; ++r) sums.push_back(fletcher32(rows.levels[0][r].data_ptr(), 64 * 32 * 32 * 4));
        rows.row_checksums.push_back(sums);
      }
      const std::int64_t chunks_before = writer.written_chunks(0);
      const at::Tensor before = rows.levels[0].clone();
      writer.append(rows, between);
      REQUIRE(at::equal(rows.levels[0], before));
      REQUIRE(calls == writer.written_chunks(0));
      REQUIRE(writer.written_chunks(0) == (first + n) / chunk_rows);
      REQUIRE(writer.written_chunks(0) > chunks_before);
      first += n;
    }
    writer.close();
  }
  REQUIRE(attr == 7);
  // The reader verifies every chunk's checksum (and a wrong one throws).
  CacheFileReader reader(path);
  const RowBatch back = reader.read_rows(0, 23);
  REQUIRE(at::equal(back.levels[0], f));
}

TEST_CASE("writeback ranges are submitted by the helper thread, and a writer that used it closes cleanly") {
  testing::TempDir dir;
  {
    const std::string path = dir.file("w.bin");
    std::ofstream(path, std::ios::binary) << std::string(1 << 16, 'x');
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    BackgroundWriteback writeback;
    writeback.request(fd, 0, 4096);
    writeback.request(fd, 4096, 0);  // empty: ignored
    writeback.request(fd, 4096, 1 << 15);
    writeback.drain();
    CHECK(writeback.ranges_submitted() == 2);
    // Named, as precompute's stage threads are: the benchmark counts unnamed threads as the encoder's.
    bool named = false;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::string name;
      std::getline(std::ifstream(task.path() / "comm"), name);
      named = named || name == "embcache sync";
    }
    CHECK(named);
    ::close(fd);
  }
  // Writeback started between appends, then the file closed while ranges may be pending.
  const std::string path = dir.file("c.h5");
  const at::Tensor f1 = at::randn({9, 64, 8, 8}), f2 = at::randn({5, 64, 8, 8});
  LabelKinds labels;
  labels.has_class = true;
  {
    CacheFileWriter writer(path, test_signature(StorageDtype::kFloat32), {feat_level({64, 8, 8})}, labels, StorageOptions{});
    writer.append(make_rows(9, 0, StorageDtype::kFloat32, f1));
    writer.start_writeback();
    writer.append(make_rows(5, 9, StorageDtype::kFloat32, f2));
    writer.start_writeback();
    writer.close();
  }
  CacheFileReader reader(path);
  REQUIRE(at::equal(reader.read_rows(0, 14).levels[0], at::cat({f1, f2})));
}

TEST_CASE("disk space is reserved ahead of a growing file without changing it, and given back") {
  // In the build tree: the temporary directory may be a filesystem without fallocate.
  const std::string stem = (std::filesystem::current_path() / ("reserve-" + std::to_string(::getpid()))).string();
  const std::string path = stem + ".bin";
  auto allocated = [](const std::string& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return std::int64_t(st.st_blocks) * 512;
  };
  auto contents = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::int64_t MiB = std::int64_t(1) << 20;
  const std::string data(8192, 'x');
  std::ofstream(path, std::ios::binary) << data;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  SpaceReservation reservation(8 * MiB);
  reservation.extend(fd);
  if (!reservation.active()) {
    ::close(fd);
    MESSAGE("this filesystem does not reserve space (fallocate); writers go on without it");
    CHECK(contents(path) == data);
    CHECK(allocated(path) < MiB);
    std::filesystem::remove(path);
    return;
  }
  CHECK(allocated(path) >= 8 * MiB);
  reservation.extend(fd);  // more than half still ahead: nothing to do
  CHECK(allocated(path) < 9 * MiB);
  reservation.extend(fd, 6 * MiB);  // 6 MiB about to be written: 8 MiB more beyond them
  CHECK(allocated(path) >= 14 * MiB);
  ::close(fd);
  CHECK(contents(path) == data);  // size and bytes never change
  reservation.release(path);
  CHECK(allocated(path) < MiB);
  CHECK(contents(path) == data);
  std::filesystem::remove(path);

  // A cache writer reserves what its expected rows take, and its file keeps only what it used.
  const std::string cache = stem + ".h5";
  LabelKinds labels;
  labels.has_class = true;
  const at::Tensor features = at::randn({100, 64, 8, 8});  // 16 KiB a row
  {
    CacheFileWriter writer(cache, test_signature(StorageDtype::kFloat32), {feat_level({64, 8, 8})}, labels,
                           StorageOptions{}, /*expected_rows=*/1000);
    CHECK(allocated(cache) >= 1000 * 16384);
    CHECK(allocated(cache) < 1000 * 16384 + 64 * MiB);  // the expected rows bound it, not 256 MiB
    writer.append(make_rows(100, 0, StorageDtype::kFloat32, features));
    writer.close();
  }
  const auto size = std::int64_t(std::filesystem::file_size(cache));
  CHECK(size > 100 * 16384);
  CHECK(allocated(cache) < size + MiB);
  CHECK(at::equal(CacheFileReader(cache).read_rows(0, 100).levels[0], features));
  std::filesystem::remove(cache);

  // A file without levels (a commit record) is small: nothing is reserved for it.
  const std::string record = stem + "-record.h5";
  {
    CacheFileWriter writer(record, test_signature(StorageDtype::kFloat32), {}, labels, StorageOptions{}, 1000);
    CHECK(allocated(record) < MiB);
    writer.close();
  }
  std::filesystem::remove(record);
}

TEST_CASE("drop-behind: a range asked to drop leaves the page cache once written; the others stay") {
  // In the build tree, not the temporary directory: on tmpfs the cached pages are the file.
  const std::string path = (std::filesystem::current_path() / ("drop-behind-" + std::to_string(::getpid()) + ".bin")).string();
  const std::size_t half = std::size_t(4) << 20;
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  const std::vector<char> data(2 * half, 'x');
  REQUIRE(::write(fd, data.data(), data.size()) == ssize_t(data.size()));
  // Fraction of [offset, offset + length) in the page cache.
  auto resident = [&](std::size_t offset, std::size_t length) {
    void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, off_t(offset));
    REQUIRE(map != MAP_FAILED);
    const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in((length + page - 1) / page);
    REQUIRE(::mincore(map, length, in.data()) == 0);
    ::munmap(map, length);
    std::size_t n = 0;
    for (unsigned char v : in) n += v & 1;
    return double(n) / double(in.size());
  };
  REQUIRE(resident(0, 2 * half) > 0.9);  // just written
  {
    BackgroundWriteback writeback;
    writeback.request(fd, 0, off_t(half), /*drop=*/false);
    writeback.request(fd, off_t(half), off_t(half), /*drop=*/true);
    writeback.drain();
  }
  CHECK(resident(0, half) > 0.9);
  CHECK(resident(half, half) < 0.1);
  std::vector<char> back(2 * half);
  REQUIRE(::pread(fd, back.data(), back.size(), 0) == ssize_t(back.size()));
  CHECK(back == data);  // dropped pages read back from the disk
  ::close(fd);
  std::filesystem::remove(path);
}

TEST_CASE("compression options parse, and unknown ones are usage errors") {
  REQUIRE(Compression::parse("none").to_string() == "none");
  REQUIRE(Compression::parse("gzip").to_string() == "gzip:1");
  REQUIRE(Compression::parse("gzip:9").to_string() == "gzip:9");
  REQUIRE(Compression::parse("lz4").to_string() == "lz4");
  REQUIRE_THROWS_AS(Compression::parse("zip"), UsageError);
  REQUIRE_THROWS_AS(Compression::parse("gzip:12"), UsageError);
  REQUIRE_THROWS_AS(storage_dtypes().parse("float64", {"dtype"}), UsageError);
}

TEST_CASE("a flipped byte in a stored chunk is detected by its checksum") {
  testing::TempDir dir;
  const std::string path = dir.file("c.h5");
  LabelKinds labels;
  labels.has_class = true;
  const at::Tensor f = at::full({64, 256}, 1.5f);
  {
    CacheFileWriter writer(path, test_signature(StorageDtype::kFloat32), {feat_level({256})}, labels, StorageOptions{}, 64);
    writer.append(make_rows(64, 0, StorageDtype::kFloat32, f));
    writer.close();
  }
  // Find the feature bytes (1.5f = 0x3fc00000) in the file and corrupt one.
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(io)), std::istreambuf_iterator<char>());
  const std::string needle("\x00\x00\xc0\x3f\x00\x00\xc0\x3f", 8);
  const auto at = bytes.find(needle);
  REQUIRE(at != std::string::npos);
  io.seekp(std::streamoff(at + 2));
  io.put('\x01');
  io.close();
  CacheFileReader reader(path);
  REQUIRE_THROWS_AS(reader.read_rows(0, 64), IoError);
}

TEST_CASE("signature differences name deciding fields only") {
  Signature a;
  a["encoder_sha256"] = "aa";
  a["dtype"] = "float16";
  a["preprocessing"] = {{"scale", 1.0}, {"mean", {0.0}}, {"std", {1.0}}};
  a["embcache_version"] = "0.1.0";
  a["encoder_path"] = "/a/enc.pt";
  a["levels"] = {"0", "1"};
  Signature b = a;
  b["embcache_version"] = "9.9.9";  // informational
  b["encoder_path"] = "/b/enc.pt";  // informational: the same file may move
  b["levels"] = {"0"};              // derived from levels_requested and the encoder
  REQUIRE(signature_differences(a, b).empty());
  b["dtype"] = "float32";
  b["preprocessing"]["mean"] = {0.5};
  b["bands"] = {2, 1, 0};           // present in one only
  REQUIRE(signature_differences(a, b) == std::vector<std::string>{"bands", "dtype", "preprocessing"});
}

TEST_CASE("the cache reader refuses a file that is not HDF5, and an HDF5 file that is not a cache") {
  testing::TempDir dir;
  std::ofstream(dir.file("text.h5")) << "not hdf5";
  REQUIRE_THROWS_AS(CacheFileReader(dir.file("text.h5")), InputError);
  { const h5::File file = h5::create_file(dir.file("x.h5")); }
  REQUIRE_THROWS_AS(CacheFileReader(dir.file("x.h5")), InputError);
}

TEST_SUITE_END();
