// Test helpers: a RAII temporary directory, small array datasets written with HDF5, fixtures.
#pragma once

#include <ATen/ATen.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "embcache/pipeline/precompute_options.hpp"
#include "embcache/probe/probe_options.hpp"
#include "embcache/store/row_batch.hpp"

namespace embcache::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Sets (or, with nullopt, unsets) an environment variable for its lifetime, then puts back what
// was there.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::optional<std::string>& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> previous_;
};

// Replaces the first `from` in the text file at `path` with `to`; REQUIREs that it is there.
void replace_in_file(const std::string& path, const std::string& from, const std::string& to);

struct ArrayDatasetSpec {
  at::Tensor images;                 // [N, C, H, W] uint8/int16/int32/float32 (written as is)
  bool images_uint16 = false;        // write int32 `images` as uint16 on disk
  std::vector<std::string> names, groups, splits;  // empty = omitted
  at::Tensor labels;                 // int64 [N] or float32 [N] / [N, K]; undefined = omitted
  at::Tensor masks;                  // int32 [N, H, W]; undefined = omitted
  std::optional<std::int64_t> ignore_index;
};

void write_array_dataset(const std::string& path, const ArrayDatasetSpec& spec);
// Overwrites pixel row `row` of /images (to simulate a dataset edited after caching).
void overwrite_image_row(const std::string& path, std::int64_t row, const at::Tensor& pixels);

// Directory holding the encoders exported by tests/python/fixtures.py (set by ctest).
std::string fixture(const std::string& name);

// REQUIREs that two blocks of cache rows are equal: keys, hashes, class labels, masks (where
// there are) and every level, whole.
void require_same_rows(const RowBatch& got, const RowBatch& want);

// The options of the tests' small precompute: the fixture `encoder` over `dataset` into `out`,
// 16-pixel crops overlapping by 4, batches of 4, one thread, quiet, no fsync.
PrecomputeOptions small_precompute(const std::string& encoder, const std::string& dataset, const std::string& out);

// Runs `body` in a new thread whose CPU affinity holds one CPU (the first of this process's), as
// in a Slurm task given one CPU of the machine or under `taskset -c N`; rethrows what it throws.
void on_one_cpu(const std::function<void()>& body);

// A classification cache of `images` 20x24 images in 3 classes (every `val_every`-th in val, the
// rest in train), precomputed with multi_scripted.pt into DIR/c.h5, and options that train on it.
ProbeOptions small_classification_probe(const TempDir& dir, int images, int val_every);

// The calling thread's id (gettid), for wait_until_asleep.
pid_t thread_id();
// Waits, up to `seconds`, until thread `tid` of this process sleeps in a wait (state S or D in
// /proc/self/task/TID/stat) or has ended. A check that a thread has not done something yet means
// something only once that thread is blocked: one that has merely not run yet passes it too.
void wait_until_asleep(pid_t tid, double seconds = 30);

}  // namespace embcache::testing
