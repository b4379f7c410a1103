#include "test_support.hpp"

#include "doctest_torch.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "embcache/h5/h5.hpp"
#include "embcache/pipeline/precompute.hpp"

namespace fs = std::filesystem;

namespace embcache::testing {

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "embcache-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

ScopedEnv::ScopedEnv(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
  if (const char* was = std::getenv(name_.c_str())) previous_ = std::string(was);
  if (value) {
    ::setenv(name_.c_str(), value->c_str(), 1);
  } else {
    ::unsetenv(name_.c_str());
  }
}

ScopedEnv::~ScopedEnv() {
  if (previous_) {
    ::setenv(name_.c_str(), previous_->c_str(), 1);
  } else {
    ::unsetenv(name_.c_str());
  }
}

void replace_in_file(const std::string& path, const std::string& from, const std::string& to) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text.replace(at, from.size(), to);
}

namespace {

h5::Type native_type(const at::Tensor& t, bool as_uint16) {
  if (as_uint16) return h5::native<std::uint16_t>();
  switch (t.scalar_type()) {
    case at::kByte: return h5::native<std::uint8_t>();
    case at::kShort: return h5::native<std::int16_t>();
    case at::kInt: return h5::native<std::int32_t>();
    case at::kLong: return h5::native<std::int64_t>();
    case at::kFloat: return h5::native<float>();
    case at::kDouble: return h5::native<double>();
    default: throw std::runtime_error("unsupported test tensor dtype");
  }
}

void write_tensor(const h5::File& file, const std::string& name, const at::Tensor& tensor, bool as_uint16 = false) {
  at::Tensor t = tensor.contiguous();
  std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  const h5::Dataspace space = h5::simple_space(dims, {}, name);
  const h5::Dataset ds = h5::create_dataset(file, name, native_type(t, as_uint16), space, name);
  h5::write_whole(ds, native_type(t, false), t.data_ptr(), name);
}

void write_strings(const h5::File& file, const std::string& name, const std::vector<std::string>& values) {
  h5::write_string_dataset(file, name, values, name);
}

}  // namespace

void write_array_dataset(const std::string& path, const ArrayDatasetSpec& spec) {
  const h5::File file = h5::create_file(path);
  write_tensor(file, "images", spec.images, spec.images_uint16);
  if (!spec.names.empty()) write_strings(file, "names", spec.names);
  if (!spec.groups.empty()) write_strings(file, "groups", spec.groups);
  if (!spec.splits.empty()) write_strings(file, "splits", spec.splits);
  if (spec.labels.defined()) write_tensor(file, "labels", spec.labels);
  if (spec.masks.defined()) {
    write_tensor(file, "masks", spec.masks);
    if (spec.ignore_index) {
      const h5::Dataset ds = h5::open_dataset(file, "masks");
      h5::write_attr(ds, "ignore_index", *spec.ignore_index);
    }
  }
}

void overwrite_image_row(const std::string& path, std::int64_t row, const at::Tensor& pixels) {
  const h5::File file = h5::open_file(path, true);
  const h5::Dataset ds = h5::open_dataset(file, "images");
  at::Tensor p = pixels.contiguous();
  h5::write_rows(ds, native_type(p, false), hsize_t(row), 1, p.data_ptr(), path);
}

std::string fixture(const std::string& name) {
  const char* dir = std::getenv("EMBCACHE_FIXTURES");
  if (dir == nullptr) throw std::runtime_error("EMBCACHE_FIXTURES is not set; run the tests through ctest");
  return std::string(dir) + "/" + name;
}

void require_same_rows(const RowBatch& got, const RowBatch& want) {
  REQUIRE(got.windows == want.windows);
  REQUIRE(got.bounds == want.bounds);
  REQUIRE(got.pixel_hashes == want.pixel_hashes);
  REQUIRE(at::equal(got.label_class, want.label_class));
  REQUIRE(got.label_mask.defined() == want.label_mask.defined());
  if (want.label_mask.defined()) REQUIRE(at::equal(got.label_mask, want.label_mask));
  REQUIRE(got.levels.size() == want.levels.size());
  for (std::size_t i = 0; i < want.levels.size(); ++i) REQUIRE(at::equal(got.levels[i], want.levels[i]));
}

PrecomputeOptions small_precompute(const std::string& encoder, const std::string& dataset, const std::string& out) {
  PrecomputeOptions o;
  o.encoder = fixture(encoder);
  o.dataset = dataset;
  o.out = out;
  o.crop_size = "16";
  o.overlap = 4;
  o.batch_size = "4";
  o.threads = 1;
  o.quiet = true;
  o.fsync = false;
  return o;
}

void on_one_cpu(const std::function<void()>& body) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  int pinned = -1;
  std::exception_ptr failure;
  std::thread task([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    pinned = sched_setaffinity(0, sizeof(one), &one);
    if (pinned != 0) return;
    try {
      body();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  task.join();
  REQUIRE(pinned == 0);
  if (failure) std::rethrow_exception(failure);
}

ProbeOptions small_classification_probe(const TempDir& dir, int images, int val_every) {
  ArrayDatasetSpec spec;
  spec.images = at::randint(0, 255, {images, 3, 20, 24}).to(at::kByte);
  spec.labels = at::arange(images, at::kLong) % 3;
  for (int i = 0; i < images; ++i) spec.splits.push_back(i % val_every == 0 ? "val" : "train");
  write_array_dataset(dir.file("data.h5"), spec);
  run_precompute(plan_precompute(small_precompute("multi_scripted.pt", dir.file("data.h5"), dir.file("c.h5"))));
  ProbeOptions o;
  o.caches = {dir.file("c.h5")};
  o.task = "classification";
  return o;
}

pid_t thread_id() { return pid_t(::syscall(SYS_gettid)); }

void wait_until_asleep(pid_t tid, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream stat(path);
    std::string text;
    if (!stat || !std::getline(stat, text)) return;  // the thread has ended
    const auto paren = text.rfind(')');  // the state follows the command, which may hold spaces
    if (paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'S' || text[paren + 2] == 'D')) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FAIL("thread " << tid << " was still running after " << seconds << " s");
}

}  // namespace embcache::testing
