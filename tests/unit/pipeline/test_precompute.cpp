#include "doctest_torch.hpp"

#include <ATen/Parallel.h>
#include <malloc.h>
#include <sched.h>
#include <omp.h>
#include <sys/stat.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "embcache/cli/option_binding.hpp"
#include "embcache/host/cpu_info.hpp"
#include "embcache/host/device.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/file_hash_memo.hpp"
#include "embcache/core/file_lock.hpp"
#include "embcache/core/sha256.hpp"
#include "embcache/host/allocator_scope.hpp"
#include "embcache/encoder/encoder.hpp"
#include "embcache/encoder/onednn_cache_view.hpp"
#include "embcache/core/bounded_queue.hpp"
#include "embcache/core/progress.hpp"
#include "embcache/h5/h5.hpp"
#include "embcache/pipeline/batch_size_search.hpp"
#include "embcache/pipeline/core_sharing.hpp"
#include "embcache/pipeline/io_stage.hpp"
#include "embcache/pipeline/precompute.hpp"
#include "embcache/store/cache_reader.hpp"
#include "embcache/store/cache_store.hpp"
#include "precompute_fixture.hpp"
#include "test_support.hpp"

using namespace embcache;
using namespace embcache::testing;

TEST_SUITE_BEGIN("pipeline");
namespace fs = std::filesystem;

TEST_CASE("a second run computes nothing: no encoder calls, cache unchanged") {
  Setup s;
  PrecomputeSummary first, second;
  REQUIRE(count_calls(s.options(), &first) > 0);
  // 24x20 windows, crop 16 overlap 4: x at 0, 8; y at 0, 4 -> 4 crops per window.
  REQUIRE(first.crops_total == 24);
  REQUIRE(first.crops_computed == 24);
  // Each stage's CPU time is its own thread's (the I/O thread's split between reading and
  // writing), waits included, so never more than the run's wall time; the writing thread did
  // some. (Its busy wall time leaves the waits out: a stage's CPU may exceed it, as it did under
  // the sanitizers, by the CPU its thread spent waiting.)
  const nlohmann::json j = first.to_json();
  const double seconds = j["seconds"];
  for (const char* stage : {"read", "prep", "convert", "write"}) {
    CAPTURE(stage);
    const double cpu = j["stage_cpu_seconds"][stage];
    CHECK(cpu >= 0);
    CHECK(cpu <= seconds);
  }
  CHECK(j["stage_cpu_seconds"]["read"].get<double>() + j["stage_cpu_seconds"]["write"].get<double>() <= seconds);
  CHECK(j["stage_cpu_seconds"]["write"].get<double>() > 0);
  // The wall time outside the encoder's calls, before the first and after the last: both
  // positive (loading the encoder comes first, installing the cache last) and, with the calls,
  // within the wall time.
  CHECK(first.seconds_before_first_encoder_call > 0);
  CHECK(first.seconds_after_last_encoder_call > 0);
  CHECK(first.seconds_before_first_encoder_call + first.encoder_seconds + first.seconds_after_last_encoder_call <=
        first.seconds);
  CHECK(j["seconds_before_first_encoder_call"].get<double>() == first.seconds_before_first_encoder_call);
  // The encoder's waits for the other stages lie outside its calls.
  CHECK(first.encoder_wait_seconds >= 0);
  CHECK(first.encoder_wait_seconds <= first.seconds - first.encoder_seconds);
  CHECK(j["encoder_waits"].get<std::int64_t>() == first.encoder_waits);
  const auto before = fs::last_write_time(s.cache);
  const auto content = CacheReader(s.cache).content_id();
  REQUIRE(content);
  CHECK(content->size() == 32);
  REQUIRE(count_calls(s.options(), &second) == 0);
  REQUIRE(second.crops_skipped == 24);
  REQUIRE(second.crops_computed == 0);
  CHECK(second.seconds_before_first_encoder_call == 0);  // no call: nothing to split
  REQUIRE(fs::last_write_time(s.cache) == before);
  // The one-line summary gives a rate only for a run that computed something.
  CHECK(contains(first.one_line(), "24 computed"));
  CHECK(contains(first.one_line(), " crops/s, "));
  CHECK(contains(second.one_line(), "0 computed, 24 cached"));
  CHECK(!contains(second.one_line(), "crops/s"));
  CHECK(contains(second.one_line(), "nothing to encode on cpu"));
  CacheReader reader(s.cache);
  CHECK(reader.content_id() == content);  // same rows, same content id
  REQUIRE(reader.rows() == 24);
  REQUIRE(reader.levels().size() == 3);
  REQUIRE(reader.label_kinds().has_mask);
}

TEST_CASE("the stage threads carry names, so top -H and perf tell them from the encoder's workers") {
  // 24 crops in batches of 4 through a queue of 8: at the first call's end every stage thread
  // is still alive (prep has crops left to make, the I/O thread rows to write).
  Setup s;
  std::set<std::string> names;
  PrecomputeHooks hooks;
  hooks.on_encoder_call = [&](std::int64_t, double) {
    for (const auto& task : fs::directory_iterator("/proc/self/task")) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      if (std::getline(comm, name)) names.insert(name);
    }
  };
  precompute(s.options(), hooks);
  for (const char* stage : {"embcache io", "embcache prep", "embcache conv"}) {
    CAPTURE(stage);
    CHECK(names.count(stage) == 1);
  }
}

TEST_CASE("the call-start hook runs once before each encoder call, outside the call's seconds") {
  // The benchmark splits thread times at these two hooks; a start without its end (or an end
  // without its start) would credit one call's times to another, and a sample inside the call's
  // clock would be charged to the encoder.
  Setup s;
  std::string order;
  std::int64_t crops = 0;
  std::chrono::steady_clock::time_point start_hook_end;
  PrecomputeHooks hooks;
  hooks.on_encoder_call_start = [&] {
    order += 's';
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    start_hook_end = std::chrono::steady_clock::now();
  };
  hooks.on_encoder_call = [&](std::int64_t batch, double seconds) {
    order += 'e';
    crops += batch;
    CHECK(seconds <= std::chrono::duration<double>(std::chrono::steady_clock::now() - start_hook_end).count());
  };
  const PrecomputeSummary summary = precompute(s.options(), hooks);
  CHECK(crops == 24);
  REQUIRE(order.size() == 2 * std::size_t(summary.encoder_calls));
  for (std::size_t i = 0; i < order.size(); i += 2) CHECK(order.substr(i, 2) == "se");
}

TEST_CASE("new windows are computed, old ones skipped") {
  Setup s;
  testing::ArrayDatasetSpec spec;
  spec.images = at::randint(0, 255, {8, 3, 20, 24}).to(at::kByte);
  spec.labels = at::arange(8, at::kLong);
  testing::ArrayDatasetSpec first = spec;
  first.images = spec.images.slice(0, 0, 6);
  first.labels = spec.labels.slice(0, 0, 6);
  testing::write_array_dataset(s.dir.file("six.h5"), first);
  testing::write_array_dataset(s.dir.file("eight.h5"), spec);
  PrecomputeOptions o = s.options();
  o.dataset = s.dir.file("six.h5");
  count_calls(o);
  const auto six = CacheReader(s.cache).content_id();
  o.dataset = s.dir.file("eight.h5");
  PrecomputeSummary summary;
  count_calls(o, &summary);
  REQUIRE(summary.crops_skipped == 24);
  REQUIRE(summary.crops_computed == 8);
  REQUIRE(summary.crops_stale == 0);
  CacheReader after(s.cache);
  REQUIRE(after.rows() == 32);
  CHECK(after.content_id() != six);  // new rows, new content id
  // A corrected label is a change too: the window's crops are recomputed, not left stale.
  spec.labels[7] = 0;
  testing::write_array_dataset(s.dir.file("eight.h5"), spec);
  count_calls(o, &summary);
  REQUIRE(summary.crops_stale == 4);
  CacheReader relabelled(s.cache);
  REQUIRE(relabelled.rows() == 32);
  CHECK(relabelled.content_id() != after.content_id());
  REQUIRE(relabelled.read_rows(0, 32).label_class.slice(0, 28, 32).eq(0).all().item<bool>());
}

TEST_CASE("changed pixels make a window's crops stale; they are recomputed and replaced") {
  Setup s;
  count_calls(s.options());
  CacheReader old_reader(s.cache);
  const RowBatch old_rows = old_reader.read_rows(0, old_reader.rows());
  testing::overwrite_image_row(s.dataset, 2, at::zeros({3, 20, 24}, at::kByte));
  PrecomputeSummary summary;
  REQUIRE(count_calls(s.options(), &summary) > 0);
  REQUIRE(summary.crops_stale == 4);
  REQUIRE(summary.crops_computed == 4);
  REQUIRE(summary.crops_skipped == 20);
  CacheReader reader(s.cache);
  REQUIRE(reader.rows() == 24);
  const CacheIndex index = reader.read_index();
  const RowBatch rows = reader.read_rows(0, reader.rows());
  int changed = 0;
  for (std::size_t r = 0; r < index.windows.size(); ++r) {
    // Find the same key among the old rows.
    for (std::size_t q = 0; q < old_rows.windows.size(); ++q) {
      if (old_rows.windows[q] == index.windows[r] &&
          std::equal(old_rows.bounds.begin() + 4 * q, old_rows.bounds.begin() + 4 * q + 4, index.bounds.begin() + 4 * r)) {
        const bool same = at::equal(old_rows.levels[0][std::int64_t(q)], rows.levels[0][std::int64_t(r)]);
        if (index.windows[r] == "win2") {
          REQUIRE_FALSE(same);
          ++changed;
        } else {
          REQUIRE(same);
        }
      }
    }
  }
  REQUIRE(changed == 4);
}

TEST_CASE("a window moved to another split is recomputed with its new split; the old rows leave the cache") {
  Setup s;
  count_calls(s.options());
  const CacheReader before(s.cache);
  const RowBatch old_rows = before.read_rows(0, before.rows());
  {
    // win1 moves from train to test; its pixels and labels stay as they were.
    const h5::File file = h5::open_file(s.dataset, true);
    const h5::Datatype text = h5::vlen_utf8_type();
    const char* test = "test";
    h5::write_rows(h5::open_dataset(file, "splits"), text, 1, 1, &test, s.dataset + ":/splits");
  }
  PrecomputeSummary summary;
  count_calls(s.options(), &summary);
  CHECK(summary.crops_stale == 4);
  CHECK(summary.crops_computed == 4);
  CHECK(summary.crops_skipped == 20);
  const CacheReader after(s.cache);
  REQUIRE(after.rows() == 24);
  const CacheIndex index = after.read_index();
  const RowBatch rows = after.read_rows(0, after.rows());
  int moved = 0;
  for (std::size_t r = 0; r < index.windows.size(); ++r) {
    if (index.windows[r] != "win1") continue;
    CHECK(index.splits[r] == "test");
    ++moved;
    for (std::size_t q = 0; q < old_rows.windows.size(); ++q) {
      if (old_rows.windows[q] == "win1" &&
          std::equal(old_rows.bounds.begin() + 4 * q, old_rows.bounds.begin() + 4 * q + 4, index.bounds.begin() + 4 * r)) {
        CHECK(at::equal(old_rows.levels[0][std::int64_t(q)], rows.levels[0][std::int64_t(r)]));  // same pixels, same bits
      }
    }
  }
  CHECK(moved == 4);
  CHECK(count_calls(s.options()) == 0);  // and the next run finds nothing to do
}

TEST_CASE("a run that commits many times installs the file it built, copying nothing at the end") {
  Setup reference_setup;
  count_calls(reference_setup.options());
  Setup s;
  fs::copy_file(reference_setup.dataset, s.dataset, fs::copy_options::overwrite_existing);
  PrecomputeOptions o = s.options();
  o.commit_seconds = 1e-6;  // a commit after every batch
  PrecomputeSummary summary;
  count_calls(o, &summary);
  REQUIRE(summary.rows_copied_at_end == 0);
  REQUIRE_FALSE(fs::exists(s.cache + ".runs"));
  const RowBatch a = CacheReader(reference_setup.cache).read_rows(0, 24);
  const RowBatch b = CacheReader(s.cache).read_rows(0, 24);
  for (std::size_t i = 0; i < a.levels.size(); ++i) REQUIRE(at::equal(a.levels[i], b.levels[i]));

  // A compressed cache is compressed once, by one copy at the end.
  PrecomputeOptions gz = o;
  gz.out = s.dir.file("gz.h5");
  gz.compression = "gzip";
  count_calls(gz, &summary);
  REQUIRE(summary.rows_copied_at_end == 24);
  REQUIRE(CacheReader(gz.out).storage().compression.to_string() == "gzip:1");
}

TEST_CASE("the committed rows of a crashed run are kept and installed by the next run") {
  Setup s;
  // A run that dies after committing: simulated by committing and dropping the store.
  PrecomputeOptions o = s.options();
  count_calls(o);
  CacheReader full(s.cache);
  const RowBatch rows = full.read_rows(0, 10);
  const StoreArgs args(full);
  fs::remove(s.cache);
  {
    auto store = args.open(s.cache);
    store->set_levels(args.levels);
    store->append(rows);
    store->commit();
    // Rows appended after the last commit: must not survive.
    store->append(full.read_rows(10, 5));
  }  // the store is dropped without consolidating, as a SIGKILL would
  REQUIRE_FALSE(fs::exists(s.cache));
  PrecomputeSummary summary;
  count_calls(o, &summary);
  REQUIRE(summary.crops_skipped == 10);
  REQUIRE(summary.crops_computed == 14);
  REQUIRE(CacheReader(s.cache).rows() == 24);
  REQUIRE_FALSE(fs::exists(s.cache + ".runs"));
}

TEST_CASE("a cache is marked complete only by a run that finished; a finished rerun clears the mark") {
  Setup s;
  PrecomputeOptions o = s.options();
  count_calls(o);
  CHECK(CacheReader(s.cache).complete() == true);
  CHECK(cache_shortfall(CacheReader(s.cache)).empty());
  CacheReader full(s.cache);
  const StoreArgs args(full);
  const RowBatch all = full.read_rows(0, 24);
  fs::remove(s.cache);
  std::optional<std::string> recovered_content;
  {
    // Killed after committing its last crop, before the rename.
    auto store = args.open(s.cache);
    store->set_levels(args.levels);
    store->append(all);
    store->commit();
  }
  {
    // A run with nothing to compute installs the committed rows and, having finished, says so,
    // through the one copy that rewrites the mark.
    auto store = args.open(s.cache);
    REQUIRE(store->recovered_rows() == 24);
    CHECK(CacheReader(s.cache).complete() == false);
    CHECK(contains(cache_shortfall(CacheReader(s.cache)), "was interrupted, so crops are missing"));
    recovered_content = CacheReader(s.cache).content_id();
    const ConsolidateStats stats = store->consolidate(/*complete=*/true);
    CHECK(stats.copied_rows == 24);
  }
  CacheReader after(s.cache);
  CHECK(after.complete() == true);
  CHECK(after.content_id() == recovered_content);  // the copy that clears the mark changes no row
  CHECK(after.rows() == 24);
  const RowBatch again = after.read_rows(0, 24);
  for (std::size_t i = 0; i < all.levels.size(); ++i) REQUIRE(at::equal(again.levels[i], all.levels[i]));

  // An interrupted run marks what it installs; commit records waiting beside a cache are named.
  {
    auto store = args.open(s.cache);
    RowBatch one = after.read_rows(0, 1);
    one.windows[0] = "extra";
    store->append(one);
    store->consolidate(/*complete=*/false);
  }
  CHECK(CacheReader(s.cache).complete() == false);
  CHECK(CacheReader(s.cache).rows() == 25);
  {
    auto store = args.open(s.cache);
    RowBatch one = after.read_rows(1, 1);
    one.windows[0] = "extra2";
    store->append(one);
    store->commit();
  }
  CHECK(pending_commit_records(s.cache) == 1);
  CHECK(contains(cache_shortfall(CacheReader(s.cache)), "rows it committed are not in the file yet"));
}

TEST_CASE("the encoder file's hash comes from the hash memo where it remembers the file, or from the file") {
  Setup s;
  const std::string encoder = s.dir.file("encoder.pt"), memo = s.dir.file("memo");
  fs::copy_file(testing::fixture("multi_scripted.pt"), encoder);
  const std::string sha = sha256_file_hex(encoder);
  REQUIRE(FileHashMemo(memo, /*settle_seconds=*/0).sha256_hex(encoder) == sha);  // remembered
  auto signed_with = [&](const std::optional<std::string>& memo_dir) {
    PrecomputeOptions o = s.options();
    o.encoder = encoder;
    o.overwrite = true;
    PrecomputePlan plan = plan_precompute(o);
    plan.encoder_hash_memo = memo_dir;
    run_precompute(plan, {});
    return CacheReader(s.cache).signature()["encoder_sha256"].get<std::string>();
  };
  CHECK(signed_with(memo) == sha);
  // The entry made to say another digest: a run that reads the memo signs with it, one without
  // a memo hashes the file.
  std::vector<fs::path> entries(fs::directory_iterator(memo), fs::directory_iterator{});
  REQUIRE(entries.size() == 1);
  const std::string other(64, 'c');
  testing::replace_in_file(entries[0].string(), sha, other);
  CHECK(signed_with(memo) == other);
  CHECK(signed_with(std::nullopt) == sha);
}

TEST_CASE("signature mismatch names the differing fields; --overwrite rebuilds") {
  Setup s;
  count_calls(s.options());
  PrecomputeOptions o = s.options();
  o.mean = "1";
  o.dtype = "float16";
  const std::string message = error_of<InputError>(o);
  REQUIRE(contains(message, "dtype"));
  REQUIRE(contains(message, "preprocessing"));
  REQUIRE(contains(message, "--overwrite"));
  REQUIRE(CacheReader(s.cache).rows() == 24);  // untouched
  o.overwrite = true;
  REQUIRE_NOTHROW(precompute(o));
  REQUIRE(CacheReader(s.cache).storage().dtype == StorageDtype::kFloat16);
  PrecomputeOptions other = s.options("multi_traced.pt");
  REQUIRE(contains(error_of<InputError>(other), "encoder_sha256"));
}

TEST_CASE("--optimize folds batch norms: features within 1e-5 of the plain encoder's, recorded, never mixed with them") {
  Setup s;
  const std::string plain_cache = s.dir.file("plain.h5");
  PrecomputeOptions plain = s.options("conv_bn.pt");
  plain.out = plain_cache;
  plain.no_optimize = true;
  precompute(plain);
  PrecomputeOptions optimized = s.options("conv_bn.pt");
  optimized.optimize = true;
  precompute(optimized);

  // The plain cache's signature is what it was before --optimize existed; the optimised one
  // names the optimisation (compared) and the difference measured when the run started.
  const Signature plain_signature = CacheReader(plain_cache).signature();
  REQUIRE_FALSE(plain_signature.contains("encoder_optimization"));
  REQUIRE_FALSE(plain_signature["computed_with"].contains("optimize_difference"));
  const Signature signature = CacheReader(s.cache).signature();
  REQUIRE(signature["encoder_optimization"] == kEncoderOptimization);
  const nlohmann::json& measured = signature["computed_with"]["optimize_difference"];
  REQUIRE(measured.size() == 3);
  for (const auto& [name, value] : measured.items()) {
    CAPTURE(name);
    CHECK(value.get<double>() < 1e-5);
  }

  // Every stored row agrees with the plain encoder's to the same order.
  CacheReader a(s.cache), b(plain_cache);
  REQUIRE(a.rows() == b.rows());
  const RowBatch fast = a.read_rows(0, a.rows()), reference = b.read_rows(0, b.rows());
  REQUIRE(fast.windows == reference.windows);
  for (std::size_t i = 0; i < reference.levels.size(); ++i) {
    CAPTURE(i);
    const double scale = reference.levels[i].abs().max().item<double>();
    CHECK((fast.levels[i] - reference.levels[i]).abs().max().item<double>() <= 1e-5 * scale);
  }

  // Extending either cache with the other setting is refused in one line, the cache untouched.
  plain.no_optimize = false;
  plain.optimize = true;
  const std::string message = error_of<InputError>(plain);
  CHECK(contains(message, "encoder_optimization"));
  CHECK(message.find('\n') == std::string::npos);
  REQUIRE_FALSE(CacheReader(plain_cache).signature().contains("encoder_optimization"));
  optimized.optimize = false;
  optimized.no_optimize = true;
  CHECK(contains(error_of<InputError>(optimized), "encoder_optimization"));
  REQUIRE(CacheReader(s.cache).rows() == a.rows());
}

TEST_CASE("by default a new cache's encoder runs as loaded, and rows already there keep their numerics") {
  Setup s;
  PrecomputeOptions o = s.options("conv_bn.pt");  // batch norms: what --optimize would fold
  CHECK(encoder_optimization(plan_precompute(o)) == Optimization::kNone);
  PrecomputeSummary summary;
  count_calls(o, &summary);
  CHECK_FALSE(summary.encoder_optimized);
  CHECK_FALSE(CacheReader(s.cache).signature().contains("encoder_optimization"));
  CHECK(encoder_optimization(plan_precompute(o)) == Optimization::kNone);  // from the cache

  // An optimised cache, as the default made new caches of encoders with batch norms before this
  // default: a run at the default extends it with optimised rows and leaves its signature as it
  // was, from the commit records of a run killed after 10 rows and from the finished cache.
  const std::string optimized_cache = s.dir.file("optimized.h5");
  PrecomputeOptions optimized = s.options("conv_bn.pt");
  optimized.out = optimized_cache;
  optimized.optimize = true;
  precompute(optimized);
  CacheReader full(optimized_cache);
  const Signature before = full.signature();
  REQUIRE(before["encoder_optimization"] == kEncoderOptimization);
  const StoreArgs args(full);
  const RowBatch first_rows = full.read_rows(0, 10);
  fs::remove(optimized_cache);
  {
    auto store = args.open(optimized_cache);
    store->set_levels(args.levels);
    store->append(first_rows);
    store->commit();
  }
  optimized.optimize = false;
  CHECK(encoder_optimization(plan_precompute(optimized)) == Optimization::kRequired);  // from its commit records
  count_calls(optimized, &summary);
  CHECK(summary.encoder_optimized);
  CHECK(summary.crops_computed == 14);
  CHECK(signature_differences(before, CacheReader(optimized_cache).signature()).empty());
  CHECK(encoder_optimization(plan_precompute(optimized)) == Optimization::kRequired);  // from the cache
  optimized.overwrite = true;
  CHECK(encoder_optimization(plan_precompute(optimized)) == Optimization::kNone);

  PrecomputeOptions both = o;
  both.optimize = both.no_optimize = true;
  CHECK_THROWS_AS(plan_precompute(both), UsageError);
}

TEST_CASE("an encoder traced in training mode is named in a warning with what makes its features random; its scripted twin is not") {
  Setup s;
  const c10::Device cpu(c10::kCPU);
  // Scripted, eval() turns its dropout, batch statistics and stochastic depth off.
  Encoder scripted(testing::fixture("train_scripted.pt"), cpu, Amp::kNone);
  CHECK(scripted.randomness().empty());
  const at::Tensor batch = at::rand({4, 3, 32, 32});
  CHECK(at::equal(scripted.forward(batch).levels[0], scripted.forward(batch).levels[0]));
  // Traced in training mode, they are part of the graph: two calls on one batch differ.
  Encoder traced(testing::fixture("train_traced.pt"), cpu, Amp::kNone);
  const std::string why = traced.randomness();
  CHECK(contains(why, "aten::bernoulli_"));
  CHECK(contains(why, "aten::dropout in training mode"));
  CHECK(contains(why, "batch statistics"));
  CHECK(contains(why, "saved in training mode"));
  CHECK(contains(why, "model.eval()"));
  CHECK(why.find('\n') == std::string::npos);
  CHECK_FALSE(at::equal(traced.forward(batch).levels[0], traced.forward(batch).levels[0]));
  for (const char* plain : {"multi_traced.pt", "vit_traced.pt", "temporal_traced.pt", "conv_bn.pt"}) {
    CAPTURE(plain);
    CHECK(Encoder(testing::fixture(plain), cpu, Amp::kNone).randomness().empty());
  }

  // precompute warns, and still runs: the summary (and --summary-json) carries the warning.
  PrecomputeSummary summary;
  count_calls(s.options("train_traced.pt"), &summary);
  REQUIRE(summary.warnings.size() == 1);
  CHECK(contains(summary.warnings[0], "train_traced.pt: its features will differ"));
  CHECK(summary.to_json()["warnings"].size() == 1);
  PrecomputeOptions plain = s.options("conv_bn.pt");
  plain.out = s.dir.file("plain.h5");
  count_calls(plain, &summary);
  CHECK(summary.warnings.empty());
  CHECK_FALSE(summary.to_json().contains("warnings"));
}

TEST_CASE("--optimize refuses an encoder that cannot be frozen in one line, which the default runs as loaded") {
  Setup s;
  PrecomputeOptions o = s.options("unfreezable.pt");  // two attributes share a tensor: freeze refuses it
  PrecomputeSummary summary;
  count_calls(o, &summary);
  CHECK_FALSE(summary.encoder_optimized);
  CHECK_FALSE(CacheReader(s.cache).signature().contains("encoder_optimization"));
  o.optimize = true;
  o.overwrite = true;
  const std::string message = error_of<InputError>(o);
  CHECK(contains(message, "cannot be frozen"));
  CHECK(contains(message, "overlaps"));
  CHECK(contains(message, "--no-optimize"));
  CHECK(message.find('\n') == std::string::npos);
  CHECK(CacheReader(s.cache).rows() == 24);
}

TEST_CASE("--optimize runs a residual CNN optimised where oneDNN's kernels can, and refuses it in one line elsewhere") {
  // On a VM whose cpuid hides the caches, oneDNN 3.6 (Debian 13) died with SIGFPE on this
  // encoder's first optimised batch (onednn_cache_view.hpp); elsewhere it is optimised.
  const std::optional<OneDnnCaches> view = onednn_cache_view();
  const std::string hazard = view ? onednn_kernel_hazard(*view) : "";
  INFO("oneDNN's hazard on this machine: " << (hazard.empty() ? "none" : hazard));
  Setup s;
  PrecomputeOptions o = s.options("conv_bn_residual.pt");
  PrecomputeSummary summary;
  CHECK(count_calls(o, &summary) > 0);  // the default, on every CPU
  CHECK_FALSE(summary.encoder_optimized);
  CHECK(CacheReader(s.cache).rows() == 24);
  o.optimize = true;
  o.overwrite = true;
  if (hazard.empty()) {
    CHECK(count_calls(o, &summary) > 0);
    CHECK(summary.encoder_optimized);
    CHECK(CacheReader(s.cache).signature()["encoder_optimization"] == kEncoderOptimization);
  } else {
    const std::string message = error_of<InputError>(o);
    CHECK(contains(message, hazard));
    CHECK(contains(message, "--no-optimize"));
    CHECK(message.find('\n') == std::string::npos);
    CHECK(CacheReader(s.cache).rows() == 24);  // untouched
  }
}

TEST_CASE("levels are selected by index or dict key; unknown levels are refused before writing") {
  Setup s;
  PrecomputeOptions o = s.options("dict_scripted.pt");
  o.levels = "pooled";
  precompute(o);
  CacheReader reader(s.cache);
  REQUIRE(reader.levels().size() == 1);
  REQUIRE(reader.levels()[0].name == "pooled");
  REQUIRE(reader.levels()[0].row_shape == std::vector<std::int64_t>{4});
  Setup t;
  PrecomputeOptions bad = t.options();
  bad.levels = "0,7";
  const std::string message = error_of<UsageError>(bad);
  REQUIRE(contains(message, "no level \"7\""));
  REQUIRE(contains(message, "0,1,2"));
  REQUIRE_FALSE(fs::exists(t.cache));
  PrecomputeOptions by_index = t.options();
  by_index.levels = "2,0";
  precompute(by_index);
  CacheReader r2(t.cache);
  REQUIRE(r2.levels()[0].name == "2");
  REQUIRE(r2.levels()[1].name == "0");
  REQUIRE(r2.levels()[1].stride == 2);
}

TEST_CASE("bad encoders: one clear error each, and no cache written") {
  Setup s;
  struct Case {
    const char* encoder;
    const char* expected;
  };
  for (const Case& c : {Case{"not_torchscript.pt", "not a loadable TorchScript"},
                        Case{"missing.pt", "encoder file not found"},
                        Case{"bad_rank.pt", "output 0 has 1 dimensions"},
                        Case{"bad_rank6.pt", "output [1] has 6 dimensions"},
                        Case{"bad_tokens.pt", "has 13 tokens for 16x16 crops, which fits no patch grid"},
                        Case{"bad_batch.pt", "batch dimension 1"},
                        Case{"bad_type.pt", "Int"},
                        Case{"shape_changes.pt", "changed shape between batches"},
                        Case{"nonfinite.pt", "NaN/Inf"},
                        Case{"zero_channels.pt", "output [1] has shape [5, 0, 16, 16], with an empty axis"},
                        Case{"zero_tokens.pt", "output 0 has shape [5, 0, 3], with an empty axis"}}) {
    INFO("encoder: " << std::string(c.encoder));
    PrecomputeOptions o = s.options(c.encoder);
    o.out = s.dir.file(std::string(c.encoder) + ".cache.h5");
    o.batch_size = "5";  // 24 crops: the last batch has 4, so shape_changes fails there
    const std::string message = error_of<InputError>(o);
    INFO("message: " << message);
    REQUIRE(contains(message, c.expected));
    REQUIRE(message.find('\n') == std::string::npos);
    REQUIRE_FALSE(fs::exists(o.out));  // the cache itself is never half-made
  }
  // The non-finite error names the level and the crop.
  PrecomputeOptions o = s.options("nonfinite.pt");
  const std::string message = error_of<InputError>(o);
  REQUIRE(contains(message, "level 0 of crop default/win"));
  o.allow_nonfinite = true;
  REQUIRE_NOTHROW(precompute(o));
}

TEST_CASE("bad datasets and options: one clear error each") {
  testing::TempDir dir;
  Setup s;
  auto with_dataset = [&](const testing::ArrayDatasetSpec& spec) {
    testing::write_array_dataset(dir.file("bad.h5"), spec);
    PrecomputeOptions o = s.options();
    o.dataset = dir.file("bad.h5");
    o.out = dir.file("out.h5");
    return o;
  };
  testing::ArrayDatasetSpec rank3;
  rank3.images = at::zeros({2, 8, 8}, at::kByte);
  REQUIRE(contains(error_of<InputError>(with_dataset(rank3)), "rank 3"));

  testing::ArrayDatasetSpec dup;
  dup.images = at::zeros({3, 3, 8, 8}, at::kByte);
  dup.names = {"a", "b", "a"};
  REQUIRE(contains(error_of<InputError>(with_dataset(dup)), "rows 0 and 2 are both \"a\""));
  dup.groups = {"g1", "g1", "g2"};  // same name in another group is fine
  REQUIRE_NOTHROW(precompute(with_dataset(dup)));

  testing::ArrayDatasetSpec labels;
  labels.images = at::zeros({3, 3, 8, 8}, at::kByte);
  labels.labels = at::zeros({2}, at::kLong);
  REQUIRE(contains(error_of<InputError>(with_dataset(labels)), "/labels has shape [2]"));

  testing::ArrayDatasetSpec masks;
  masks.images = at::zeros({3, 3, 8, 8}, at::kByte);
  masks.masks = at::zeros({3, 8, 9}, at::kInt);
  REQUIRE(contains(error_of<InputError>(with_dataset(masks)), "/masks has shape [3, 8, 9]"));

  testing::ArrayDatasetSpec huge_class;  // a class id no probe could hold a score for
  huge_class.images = at::zeros({2, 3, 8, 8}, at::kByte);
  huge_class.labels = at::tensor({std::int64_t(1), std::int64_t(1) << 62}, at::kLong);
  REQUIRE(contains(error_of<InputError>(with_dataset(huge_class)), "/labels row 1 is 4611686018427387904; class ids must be from 0 to 999999"));

  testing::ArrayDatasetSpec doubles;
  doubles.images = at::zeros({1, 3, 8, 8}, at::kDouble);
  REQUIRE(contains(error_of<InputError>(with_dataset(doubles)), "float64"));

  {
    const h5::File f = h5::create_file(dir.file("noimages.h5"));
  }
  PrecomputeOptions o = s.options();
  o.dataset = dir.file("noimages.h5");
  REQUIRE(contains(error_of<InputError>(o), "missing dataset /images"));

  o = s.options();
  o.bands = "0,3";
  REQUIRE(contains(error_of<UsageError>(o), "band 3 is out of range"));
  o = s.options();
  o.mean = "1,2";
  REQUIRE(contains(error_of<UsageError>(o), "--mean: has 2 values"));
  o = s.options();
  o.scale = std::nan("");
  REQUIRE(contains(error_of<UsageError>(o), "--scale: expected a finite, non-zero factor"));
  o.scale = 0;
  REQUIRE(contains(error_of<UsageError>(o), "--scale: expected a finite, non-zero factor, got 0"));
  o = s.options();
  o.overlap = 16;
  REQUIRE(contains(error_of<UsageError>(o), "--overlap"));
  // Fixed limits far above any real use.
  o = s.options();
  o.threads = -2;
  REQUIRE(contains(error_of<UsageError>(o), "--threads: expected 0 (one per CPU this process may run on) or a thread count from 0 to 4096, got -2"));
  o.threads = 100000;
  REQUIRE(contains(error_of<UsageError>(o), "--threads:"));
  o = s.options();
  o.batch_size = "100000";
  REQUIRE(contains(error_of<UsageError>(o), "--batch-size: expected auto or a number of crops from 1 to 65536"));
  o = s.options();
  o.segment_mb = std::int64_t(1) << 40;
  REQUIRE(contains(error_of<UsageError>(o), "--segment-mb:"));
  o = s.options();
  o.commit_seconds = 1e12;
  REQUIRE(contains(error_of<UsageError>(o), "--commit-seconds:"));
  o = s.options();
  o.shard = "0/1000000";
  REQUIRE(contains(error_of<UsageError>(o), "--shard:"));
  o = s.options();
  o.device = "cuda:0";
  if (!at::hasCUDA()) REQUIRE(contains(error_of<UsageError>(o), "CUDA is not available"));
  o = s.options();
  o.out = dir.file("no/such/dir/cache.h5");
  REQUIRE(contains(error_of<IoError>(o), "does not exist"));
  std::ofstream(dir.file("text.h5")) << "hello";
  o = s.options();
  o.out = dir.file("text.h5");
  REQUIRE(contains(error_of<InputError>(o), "not an HDF5 file, so not an embcache cache; embcache never replaces"));
  h5::create_file(dir.file("other.h5"));
  o.out = dir.file("other.h5");
  REQUIRE(contains(error_of<InputError>(o), "without the embcache_format attribute, so not an embcache cache; "
                                            "embcache never replaces other files: choose another --out"));
  o.overwrite = true;
  REQUIRE(contains(error_of<InputError>(o), "embcache never replaces other files"));
  REQUIRE(fs::exists(dir.file("other.h5")));
}

TEST_CASE("an unwritable directory is refused before any work") {
  if (::geteuid() == 0) {
    // root ignores directory permissions; a path under a regular file fails the same way.
    Setup s;
    std::ofstream(s.dir.file("file")) << "x";
    PrecomputeOptions o = s.options();
    o.out = s.dir.file("file/cache.h5");
    REQUIRE_THROWS_AS(precompute(o), IoError);
    return;
  }
  Setup s;
  fs::create_directory(s.dir.file("ro"));
  ::chmod(s.dir.file("ro").c_str(), 0555);
  PrecomputeOptions o = s.options();
  o.out = s.dir.file("ro/cache.h5");
  REQUIRE(contains(error_of<IoError>(o), "writable"));
}

TEST_CASE("uint16 pixels beyond int16's range are read exactly") {
  // The same values stored as uint16 and as int32 must give bit-identical features; reading
  // uint16 through a signed 16-bit type would wrap 60000 to -5536.
  testing::TempDir dir;
  const at::Tensor values = at::randint(30000, 65535, {2, 3, 8, 8}).to(at::kInt);
  std::vector<std::string> caches;
  for (bool as_uint16 : {true, false}) {
    testing::ArrayDatasetSpec spec;
    spec.images = values;
    spec.images_uint16 = as_uint16;
    const std::string name = as_uint16 ? "u16" : "i32";
    testing::write_array_dataset(dir.file(name + ".h5"), spec);
    PrecomputeOptions o;
    o.encoder = testing::fixture("single_scripted.pt");
    o.dataset = dir.file(name + ".h5");
    o.out = dir.file(name + "-cache.h5");
    o.quiet = true;
    o.fsync = false;
    o.threads = 1;
    o.batch_size = "2";
    o.scale = 0.0001;
    precompute(o);
    caches.push_back(o.out);
  }
  const RowBatch a = CacheReader(caches[0]).read_rows(0, 2);
  const RowBatch b = CacheReader(caches[1]).read_rows(0, 2);
  REQUIRE(at::equal(a.levels[0], b.levels[0]));
}

TEST_CASE("under auto, the stages decide light or heavy once, on the fastest stored batches") {
  // Under auto the stages decide after 8 stored batches, on the fastest: 4 MB in 2 ms is light.
  StagePriority heavy(StageScheduling::kAuto), light(StageScheduling::kAuto), idle(StageScheduling::kIdle);
  for (int batch = 0; batch < 7; ++batch) {
    heavy.observe(4e6, 0.05);
    light.observe(4e6, batch == 0 ? 0.03 : 0.002);  // the first call is slow
  }
  CHECK(heavy.decision() == "idle (undecided)");
  CHECK(light.decision() == "idle (undecided)");
  heavy.observe(4e6, 0.05);
  light.observe(4e6, 0.002);
  CHECK(heavy.decision() == "idle");
  CHECK(light.decision() == "normal");
  heavy.observe(4e6, 0.0001);  // decided once
  CHECK(heavy.decision() == "idle");
  for (int batch = 0; batch < 8; ++batch) idle.observe(4e6, 0.001);
  CHECK(idle.decision() == "idle");
}

// Threads that spin at normal scheduling until destroyed: other work on a shared machine.
class BusyThreads {
 public:
  explicit BusyThreads(unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        while (!stop_.load(std::memory_order_relaxed)) {
        }
      });
    }
  }
  ~BusyThreads() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

TEST_CASE("the throttle helper waits for the decision, and gives up once the run is over") {
  StagePriority light(StageScheduling::kAuto);
  std::atomic<int> decided{-1};
  std::atomic<pid_t> waiter_id{0};
  std::thread waiter([&] {
    waiter_id = thread_id();
    decided = int(light.wait_decided([] { return false; }));
  });
  while (waiter_id.load() == 0) std::this_thread::yield();
  wait_until_asleep(waiter_id);
  CHECK(decided.load() == -1);  // undecided: still waiting
  for (int i = 0; i < 8; ++i) light.observe(1e9, 0.01);  // 100 GB/s of features: light
  waiter.join();
  CHECK(decided.load() == 1);

  StagePriority undecided(StageScheduling::kAuto);
  std::atomic<bool> over{false};
  std::atomic<pid_t> helper_id{0};
  std::thread helper([&] {
    helper_id = thread_id();
    decided = int(undecided.wait_decided([&] { return over.load(); }));
  });
  while (helper_id.load() == 0) std::this_thread::yield();
  wait_until_asleep(helper_id);  // waiting for a decision that does not come
  over = true;
  helper.join();
  CHECK(decided.load() == 0);
}

TEST_CASE("under auto, idle stages that keep the encoder waiting for a core move to normal scheduling") {
  StagePriority heavy(StageScheduling::kAuto), disk(StageScheduling::kAuto), unknown(StageScheduling::kAuto),
      fresh(StageScheduling::kAuto), idle(StageScheduling::kIdle);
  for (StagePriority* p : {&heavy, &disk, &unknown, &idle}) {
    for (int batch = 0; batch < 8; ++batch) p->observe(4e6, 0.5);  // 4 s of calls
  }
  REQUIRE(heavy.decision() == "idle");
  CHECK(heavy.watching());
  heavy.encoder_waited(0.9, 0.9);
  CHECK(heavy.decision() == "idle");  // under a second
  heavy.encoder_waited(0.3, 0.3);
  CHECK(heavy.decision() == "idle");  // 1.2 s, 23% of the time
  heavy.encoder_waited(0.3, 0.3);
  CHECK(heavy.decision() == "normal (idle stages starved)");  // 1.5 s, 27%, runnable throughout
  CHECK_FALSE(heavy.watching());
  // Starved, not light: the encoder's OpenMP spinning is not throttled.
  CHECK_FALSE(heavy.wait_decided([] { return true; }));

  // The same waits on stages that sleep in reads (a slow disk): idle stays.
  disk.encoder_waited(1.5, 0.2);
  CHECK(disk.decision() == "idle");
  disk.encoder_waited(1.0, 0.9);  // 2.5 s waited, 1.1 s of it runnable: under half
  CHECK(disk.decision() == "idle");
  disk.encoder_waited(0.5, 0.5);  // 3 s, 1.6 s
  CHECK(disk.decision() == "normal (idle stages starved)");
  // Where the kernel keeps no schedstat, the waits alone decide.
  unknown.encoder_waited(1.5, -1);
  CHECK(unknown.decision() == "normal (idle stages starved)");
  fresh.encoder_waited(1.0, 1.0);  // before any batch was stored
  CHECK(fresh.decision() == "normal (idle stages starved)");
  idle.encoder_waited(100, 100);
  CHECK(idle.decision() == "idle");
  CHECK_FALSE(idle.watching());
}

TEST_CASE("a watched thread's run delay grows while it waits for a core") {
  StagePriority priority(StageScheduling::kAuto);
  CHECK(priority.stage_run_delay() == 0);  // no thread watched yet
  std::atomic<bool> watched{false}, stop{false};
  std::thread stage([&] {
    priority.watch_this_thread();
    watched = true;
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  while (!watched.load()) std::this_thread::yield();
  const double before = priority.stage_run_delay();
  // Negative where the kernel keeps no schedstat (CONFIG_SCHED_INFO); precompute then goes by the
  // waits alone, but the kernels we run on keep it.
  CHECK(before >= 0);
  double after = before;
  {
    // More busy threads than cores: the watched one spends some of the time waiting for a core.
    const BusyThreads busy(std::max(2u, std::thread::hardware_concurrency()) + 1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (after <= before + 0.01 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      after = priority.stage_run_delay();
    }
  }
  stop = true;
  stage.join();
  CHECK(after > before + 0.01);
}

TEST_CASE("with its one core busy, a heavy encoder's idle stages move to normal scheduling and the run completes") {
  Setup s(96);
  PrecomputeOptions o = s.options("heavy.pt");
  o.batch_size = "2";
  o.threads = 0;  // one per usable CPU: the encoder leaves none free, so its stages start idle
  PrecomputeSummary summary;
  // On one CPU, beside a busy thread of normal priority, a SCHED_IDLE stage gets ~0.3% of it:
  // without the move, this run takes minutes. With every core of the machine busy instead, the
  // encoder's OpenMP threads would fight the busy threads (and other tests) for the cores and run
  // so slowly that its waits stay under a quarter of the run, where the judgement rightly keeps
  // the stages idle. One CPU and one intra-op thread take OpenMP out of it: the encoder gets half
  // the core and the stages none.
  testing::on_one_cpu([&] {
    const BusyThreads busy(1);
    summary = precompute(o);
  });
  // Printed on failure: the judgement needs 1 s of waits, a quarter of the run, and the stages
  // runnable without a core for half of them.
  CAPTURE(summary.threads);
  CAPTURE(summary.encoder_waits);
  CAPTURE(summary.encoder_wait_seconds);
  CAPTURE(summary.encoder_seconds);
  CAPTURE(summary.seconds);
  CHECK(summary.threads == 1);
  CHECK(summary.stage_priority == "normal (idle stages starved)");
  CHECK(summary.crops_computed == summary.crops_total);
}

TEST_CASE("the encoder's waits hold its OpenMP workers inside a region, run once on the caller, and pass errors on") {
  const auto caller = std::this_thread::get_id();
  int calls = 0, team = 0;
  bool in_region = false, on_caller = false;
  wait_with_openmp_workers_asleep(2, [&] {
    ++calls;
    on_caller = std::this_thread::get_id() == caller;
    in_region = omp_in_parallel() != 0;
    team = omp_get_num_threads();  // the other worker waits on a condition variable, not spinning
  });
  CHECK(calls == 1);
  CHECK(on_caller);
  CHECK(in_region);
  CHECK(team == 2);
  CHECK_THROWS_AS(wait_with_openmp_workers_asleep(2, [] { throw std::runtime_error("stop"); }), std::runtime_error);
  // One thread: no region at all.
  wait_with_openmp_workers_asleep(1, [&] { in_region = omp_in_parallel() != 0; });
  CHECK_FALSE(in_region);
}

// The OpenMP team size ATen's parallel loops get in the calling thread: LibTorch sets it at the
// thread's first parallel loop, which an elementwise operation over 1M values makes happen.
int aten_team_size() {
  const at::Tensor t = at::ones({1 << 20}) * 2;
  return omp_get_max_threads();
}

TEST_CASE("stage threads open no OpenMP team: ATen's parallel loops run on the stage's thread alone") {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  int plain = 0, stage = 0;
  std::thread([&] { plain = aten_team_size(); }).join();  // a new thread goes parallel by default
  std::thread([&] { without_openmp_team([&] { stage = aten_team_size(); }); }).join();
  at::set_num_threads(before);
  CHECK(plain == 2);
  CHECK(stage == 1);
}

TEST_CASE("idle stages wait while the encoder is inside a call, and go on when it returns or the stages turn normal") {
  StagePriority priority(StageScheduling::kIdle);
  std::atomic<bool> passed{false};
  std::atomic<pid_t> stage_id{0};
  priority.encoder_call_begins();
  std::thread stage([&] {
    stage_id = thread_id();
    bool normal_now = false;
    priority.follow(normal_now);
    passed = true;
  });
  while (stage_id.load() == 0) std::this_thread::yield();
  wait_until_asleep(stage_id);  // at the gate, or gone had it not waited
  CHECK_FALSE(passed.load());
  priority.encoder_call_ends();
  stage.join();
  CHECK(passed.load());
  // At normal scheduling nothing waits.
  StagePriority normal(StageScheduling::kNormal);
  normal.encoder_call_begins();
  bool normal_now = true;
  normal.follow(normal_now);
  normal.encoder_call_ends();
  CHECK(normal_now);
}

TEST_CASE("the I/O stage's reads wait out an encoder call that starts between two of them") {
  // A read burst (filling the window queue, or between the chunks of a write) that ran on into a
  // call took slices of a core from the encoder's threads at SCHED_IDLE.
  Setup s;
  count_calls(s.options());
  const StoreArgs args{CacheReader(s.cache)};
  const std::unique_ptr<CacheStore> store = args.open(s.dir.file("fresh.h5"));
  StagePriority priority(StageScheduling::kIdle);
  // Four windows; the encoder's call starts while the second is read.
  struct Source : WindowSource {
    StagePriority& priority;
    std::vector<WindowInfo> infos{4};
    std::atomic<int> reads{0};
    explicit Source(StagePriority& p) : priority(p) {}
    const std::vector<WindowInfo>& windows() const override { return infos; }
    std::int64_t channels() const override { return 3; }
    LabelKinds label_kinds() const override { return {}; }
    std::string describe() const override { return "four windows"; }
    WindowData read(std::size_t index) override {
      if (index == 1) priority.encoder_call_begins();
      ++reads;
      return {};
    }
  } source(priority);
  RawQueue raw(8);
  RowQueue rows(2);
  RunContext context;
  Progress progress("test", 4, Progress::Mode::kQuiet);
  const std::atomic<std::int64_t> none{0};
  IoStage io(source, raw, rows, *store, context, priority, progress, none);
  // The stage's thread runs under SCHED_IDLE: beside other tests (ctest -j) it may wait long for
  // a core, so the waits below allow seconds. With windows still to read and room in the queue,
  // it sleeps only at the gate.
  std::atomic<pid_t> stage_id{0};
  std::thread stage([&] {
    stage_id = thread_id();
    io.run();
  });
  for (int i = 0; i < 1000 && source.reads.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  wait_until_asleep(stage_id);
  CHECK(source.reads.load() == 2);
  priority.encoder_call_ends();
  for (int i = 0; i < 1000 && source.reads.load() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(source.reads.load() == 4);
  rows.close();
  stage.join();
  CHECK(io.finished);
}

TEST_CASE("an encoder that leaves cores free has nothing to share: under auto its stages run at normal scheduling, ungated") {
  StagePriority spare(StageScheduling::kAuto, /*spare_cores=*/true);
  CHECK(spare.decision() == "normal (spare cores)");
  CHECK_FALSE(spare.watching());  // no starvation to judge
  // No spin throttle: the encoder's OpenMP workers spin on their own cores.
  CHECK_FALSE(spare.wait_decided([] { return false; }));
  // A stage goes on while the encoder is inside a call.
  spare.encoder_call_begins();
  bool normal_now = false;
  std::thread stage([&] { spare.follow(normal_now); });
  stage.join();
  spare.encoder_call_ends();
  CHECK(normal_now);
  // Decided from the start: the batches and waits that decide an undecided run change nothing.
  for (int batch = 0; batch < 8; ++batch) spare.observe(4e6, 0.05);
  spare.encoder_waited(100, 100);
  CHECK(spare.decision() == "normal (spare cores)");
  // --stage-priority idle and normal are obeyed as given.
  CHECK(StagePriority(StageScheduling::kIdle, true).decision() == "idle");
  CHECK(StagePriority(StageScheduling::kNormal, true).decision() == "normal");
  CHECK(StagePriority(StageScheduling::kAuto, false).decision() == "idle (undecided)");
}

TEST_CASE("a run whose encoder threads leave cores free says so, and one with a thread per core starts idle") {
  const int cores = usable_cpus();  // the affinity's CPUs, capped by a cgroup quota (test_cpu_info.cpp)
  CHECK_FALSE(encoder_leaves_cores_free(cores));
  CHECK(encoder_leaves_cores_free(cores - 1) == (cores > 1));
  Setup s(8);
  PrecomputeOptions o = s.options();
  o.threads = 1;
  CHECK(precompute(o).stage_priority == (cores > 1 ? "normal (spare cores)" : "idle (undecided)"));
  o.overwrite = true;
  o.threads = 0;  // one per core
  const std::string decision = precompute(o).stage_priority;
  CHECK(decision.rfind("normal (spare", 0) != 0);
}

TEST_CASE("the default --threads is one per CPU the process may run on (a cpuset), not per CPU of the machine") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  Setup s(8);
  PrecomputeOptions o = s.options();
  o.threads = 0;
  CHECK(usable_cpus() <= CPU_COUNT(&allowed));  // a cgroup's CPU quota may cap it (test_cpu_info.cpp)
  CHECK(plan_precompute(o).threads == usable_cpus());
  // As in a Slurm task given one CPU of the machine (or `taskset -c N`): a thread whose affinity
  // holds one CPU, as a process started so would. On a machine with more than one CPU,
  // hardware_concurrency() counts them all and would start more encoder threads than CPUs.
  int threads_planned = -1, cpus_seen = -1;
  PrecomputeSummary summary;
  testing::on_one_cpu([&] {
    cpus_seen = usable_cpus();
    threads_planned = plan_precompute(o).threads;
    summary = precompute(o);
  });
  CHECK(cpus_seen == 1);
  CHECK(threads_planned == 1);
  CHECK(summary.threads == 1);
  CHECK(summary.crops_computed == summary.crops_total);
  CHECK(summary.crops_total > 0);
  CHECK(summary.stage_priority.rfind("normal (spare", 0) != 0);  // one thread on its one CPU leaves none free
  // --threads given is obeyed whatever the affinity.
  o.threads = 3;
  CHECK(plan_precompute(o).threads == 3);
}

TEST_CASE("--batch-size auto keeps the fastest size and stops at the first that gains too little") {
  BatchSizeSearch search;
  CHECK(search.record(4, 100));   // the first size: always go on
  CHECK(search.record(8, 150));   // 50% faster
  CHECK(!search.record(16, 152)); // 1.3% faster: within the noise, no larger size is tried
  CHECK(search.chosen() == 16);   // ... but the fastest is kept
  BatchSizeSearch slower;
  slower.record(4, 100);
  CHECK(!slower.record(8, 90));
  CHECK(slower.chosen() == 4);

  // Through a run: the trials are consecutive candidates from 4, every trial but the last
  // gained the margin, and the chosen size is the fastest tried and the one the run used.
  Setup s;
  PrecomputeOptions o = s.options();
  o.batch_size = "auto";
  std::vector<std::int64_t> call_sizes;
  PrecomputeHooks hooks;
  hooks.on_encoder_call = [&](std::int64_t n, double) { call_sizes.push_back(n); };
  const PrecomputeSummary summary = precompute(o, hooks);
  REQUIRE(summary.crops_computed == 24);
  const auto& trials = summary.batch_size_trials;
  REQUIRE(trials.size() >= 2);
  std::int64_t expected_size = 4, fastest = 0;
  double best = 0;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    CAPTURE(i);
    CHECK(trials[i]["batch_size"].get<std::int64_t>() == expected_size);
    const double rate = trials[i]["crops_per_second"];
    if (i + 1 < trials.size()) CHECK(rate > best * (1 + BatchSizeSearch::kMinGain));
    if (rate > best) {
      best = rate;
      fastest = expected_size;
    }
    expected_size *= 2;
  }
  CHECK(summary.batch_size == fastest);
  // Two calls per trial, then the run's calls at the chosen size (a short last batch is padded).
  REQUIRE(call_sizes.size() == 2 * trials.size() + std::size_t((24 + fastest - 1) / fastest));
  for (std::size_t i = 2 * trials.size(); i < call_sizes.size(); ++i) CHECK(call_sizes[i] == fastest);
}

TEST_SUITE_END();
