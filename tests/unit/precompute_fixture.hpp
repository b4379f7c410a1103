// Test helpers for runs of precompute: a small array dataset and its cache, runs stated as
// options (as a user states them), their encoder calls and errors, and what reopening a cache's
// store takes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "doctest_torch.hpp"
#include "embcache/pipeline/precompute.hpp"
#include "embcache/pipeline/precompute_plan.hpp"
#include "embcache/store/cache_reader.hpp"
#include "embcache/store/cache_store.hpp"
#include "test_support.hpp"

namespace embcache::testing {

// The tests state their runs as options, as a user does; the plan is made as the CLI makes it.
inline PrecomputeSummary precompute(const PrecomputeOptions& o, const PrecomputeHooks& hooks = {}) {
  return run_precompute(plan_precompute(o), hooks);
}

struct Setup {
  TempDir dir;
  std::string dataset = dir.file("data.h5");
  std::string cache = dir.file("cache.h5");

  explicit Setup(std::int64_t n = 6, std::int64_t h = 20, std::int64_t w = 24) {
    ArrayDatasetSpec spec;
    spec.images = at::randint(0, 255, {n, 3, h, w}).to(at::kByte);
    for (std::int64_t i = 0; i < n; ++i) {
      spec.names.push_back("win" + std::to_string(i));
      spec.splits.push_back(i % 3 == 0 ? "val" : "train");
    }
    spec.labels = at::arange(n, at::kLong) % 3;
    spec.masks = at::randint(0, 4, {n, h, w}).to(at::kInt);
    spec.ignore_index = 255;
    write_array_dataset(dataset, spec);
  }

  PrecomputeOptions options(const std::string& encoder = "multi_scripted.pt") const {
    return small_precompute(encoder, dataset, cache);
  }
};

inline std::int64_t count_calls(const PrecomputeOptions& o, PrecomputeSummary* summary = nullptr) {
  std::int64_t calls = 0;
  PrecomputeHooks hooks;
  hooks.on_encoder_call = [&](std::int64_t, double) { ++calls; };
  const PrecomputeSummary s = precompute(o, hooks);
  if (summary) *summary = s;
  return calls;
}

template <typename E>
std::string error_of(const PrecomputeOptions& o) {
  try {
    precompute(o);
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an error");
  return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// What reopening a cache's store takes, read from the cache.
struct StoreArgs {
  Signature signature;
  std::vector<LevelSpec> levels;
  LabelKinds kinds;
  StorageOptions storage;
  explicit StoreArgs(const CacheReader& r)
      : signature(r.signature()), levels(r.levels()), kinds(r.label_kinds()), storage(r.storage()) {}
  std::unique_ptr<CacheStore> open(const std::string& path) const {
    return std::make_unique<CacheStore>(path, signature, kinds, storage, CommitPolicy{}, false);
  }
};


}  // namespace embcache::testing
