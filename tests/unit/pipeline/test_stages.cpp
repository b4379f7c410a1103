// The precompute stages alone, each run to its end in this thread over queues the test fills,
// and the serial executor against the threaded one.
#include "doctest_torch.hpp"

#include <chrono>
#include <limits>
#include <string>
#include <thread>
#include <unordered_map>

#include "embcache/core/error.hpp"
#include "embcache/pipeline/convert_stage.hpp"
#include "embcache/pipeline/encode_stage.hpp"
#include "embcache/pipeline/precompute.hpp"
#include "embcache/pipeline/prep_stage.hpp"
#include "embcache/store/cache_file_reader.hpp"
#include "test_support.hpp"

using namespace embcache;

namespace {

constexpr std::size_t kUnbounded = std::numeric_limits<std::size_t>::max();

template <typename T>
std::vector<T> drain(BoundedQueue<T>& queue) {
  std::vector<T> items;
  while (auto item = queue.try_pop()) items.push_back(std::move(*item));
  return items;
}

// `n` crops of random 3x16x16 inputs in a queue that is then closed; returns their inputs.
std::vector<at::Tensor> push_crops(CropQueue& crops, int n) {
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < n; ++i) {
    CropItem item;
    item.key = CropKey{"g", "w" + std::to_string(i), Bounds{0, 0, 16, 16}};
    item.input = at::randn({3, 16, 16});
    inputs.push_back(item.input);
    crops.push(std::move(item));
  }
  crops.close();
  return inputs;
}

RawWindow raw_window(std::size_t index, std::int64_t h, std::int64_t w, std::int64_t label) {
  RawWindow raw;
  raw.index = index;
  raw.data.pixels = at::randint(0, 255, {3, h, w}).to(at::kByte);
  raw.data.label_class = label;
  return raw;
}

PrecomputeOptions small_run(const testing::TempDir& dir, const std::string& out) {
  testing::ArrayDatasetSpec spec;
  spec.images = at::randint(0, 255, {7, 3, 20, 24}).to(at::kByte);
  spec.labels = at::arange(7, at::kLong) % 3;
  spec.masks = at::randint(0, 4, {7, 20, 24}).to(at::kInt);
  spec.ignore_index = 255;
  testing::write_array_dataset(dir.file("data.h5"), spec);
  return testing::small_precompute("multi_scripted.pt", dir.file("data.h5"), out);
}

}  // namespace

TEST_SUITE("pipeline") {

TEST_CASE("prep stage alone: every crop of the grid, cached ones skipped, changed ones counted stale") {
  const std::vector<WindowInfo> windows = {{"g", "a", "train", Bounds{0, 0, 24, 20}}, {"g", "b", "val", Bounds{0, 0, 16, 16}}};
  CropQueue crops(kUnbounded);
  PrepStage::Settings settings;
  settings.grid.width = settings.grid.height = 16;
  settings.grid.overlap = 4;
  settings.labels.has_class = true;
  // Window a has 4 crops (x 0, 8; y 0, 4); one is cached as it is, one with another hash, one in
  // another split.
  std::unordered_map<std::string, CacheStore::CommittedRow> committed;
  const std::vector<std::string> splits = {"train", "val"};
  RawQueue probe_in(kUnbounded);
  CropQueue probe_out(kUnbounded);
  RawWindow first = raw_window(0, 20, 24, 1);
  probe_in.push(first);
  probe_in.close();
  const StagePriority priority(StageScheduling::kNormal);
  PrepStage(probe_in, probe_out, windows, settings, committed, splits, priority).run();
  const std::vector<CropItem> all_of_a = drain(probe_out);
  REQUIRE(all_of_a.size() == 4);
  committed[all_of_a[0].key.map_key()] = {all_of_a[0].hash, 0};
  committed[all_of_a[1].key.map_key()] = {all_of_a[1].hash + 1, 0};
  committed[all_of_a[2].key.map_key()] = {all_of_a[2].hash, 1};  // cached as val; the window is train now

  const RawWindow second = raw_window(1, 16, 16, 2);
  RawQueue in(kUnbounded);
  in.push(first);
  in.push(second);
  in.close();
  PrepStage stage(in, crops, windows, settings, committed, splits, priority);
  stage.run();
  const std::vector<CropItem> out = drain(crops);
  REQUIRE(crops.drained());  // closed at the end
  REQUIRE(stage.skipped.load() == 1);
  REQUIRE(stage.stale.load() == 2);
  REQUIRE(out.size() == 3 + 1);
  REQUIRE(out[0].key.map_key() == all_of_a[1].key.map_key());
  REQUIRE(out[1].key.map_key() == all_of_a[2].key.map_key());
  REQUIRE(out[1].split == "train");
  REQUIRE(out[3].key.window == "b");
  REQUIRE(out[3].split == "val");
  REQUIRE(out[3].label_class == 2);
  for (const auto& item : out) {
    REQUIRE((item.input.scalar_type() == at::kFloat));
    REQUIRE(item.input.sizes().vec() == std::vector<std::int64_t>{3, 16, 16});
  }

  // With batch slots, the crops that are pushed (not the skipped one) fill batches of 3 in order,
  // with the values of crops normalised one by one.
  settings.batch_slots = 3;
  RawQueue in_slots(kUnbounded);
  in_slots.push(first);
  in_slots.push(second);
  in_slots.close();
  CropQueue slotted(kUnbounded);
  PrepStage(in_slots, slotted, windows, settings, committed, splits, priority).run();
  const std::vector<CropItem> in_batches = drain(slotted);
  REQUIRE(in_batches.size() == out.size());
  const at::Tensor& slot0 = in_batches[0].input;
  for (std::size_t i = 0; i < in_batches.size(); ++i) {
    CAPTURE(i);
    REQUIRE(at::equal(in_batches[i].input, out[i].input));
    REQUIRE(in_batches[i].input.is_contiguous());
    REQUIRE(in_batches[i].input.storage().is_alias_of(slot0.storage()) == (i < 3));
    if (i < 3) REQUIRE(in_batches[i].input.storage_offset() == std::int64_t(i) * slot0.numel());
  }
  REQUIRE(in_batches[3].input.storage_offset() == 0);  // the first slot of the next batch
}

TEST_CASE("encode stage alone: batches of the set size, a short last one padded and cut back, levels described") {
  Encoder encoder(testing::fixture("multi_scripted.pt"), c10::Device(c10::kCPU), Amp::kNone);
  CropQueue crops(kUnbounded);
  EncodedQueue encoded(kUnbounded);
  const std::vector<at::Tensor> inputs = push_crops(crops, 6);
  EncodeStage::Settings settings;
  settings.batch_size = 4;
  std::vector<std::int64_t> calls;
  settings.on_call = [&](std::int64_t n, double) { calls.push_back(n); };
  StagePriority priority(StageScheduling::kNormal);
  RunContext context;
  EncodeStage stage(crops, encoded, encoder, settings, priority, context);
  stage.run();
  REQUIRE(calls == std::vector<std::int64_t>{4, 4});  // the last batch of 2 is padded to 4
  const std::vector<EncodedBatch> batches = drain(encoded);
  REQUIRE(batches.size() == 2);
  REQUIRE(batches[0].items.size() == 4);
  REQUIRE(batches[1].items.size() == 2);
  REQUIRE_FALSE(batches[1].items[0].input.defined());  // inputs are released once encoded
  const std::vector<LevelSpec> levels = context.levels();
  REQUIRE(levels.size() == batches[0].levels.size());
  for (std::size_t k = 0; k < levels.size(); ++k) {
    REQUIRE(batches[1].levels[k].size(0) == 2);
    std::vector<std::int64_t> row(batches[0].levels[k].sizes().begin() + 1, batches[0].levels[k].sizes().end());
    REQUIRE(row == levels[k].row_shape);
  }
  // The padded batch's rows equal the same crops encoded in a full batch of their own.
  const EncoderOutput alone = encoder.forward(at::stack({inputs[4], inputs[5], inputs[0], inputs[1]}));
  for (std::size_t k = 0; k < levels.size(); ++k) {
    REQUIRE(at::allclose(batches[1].levels[k], alone.levels[std::size_t(levels[k].index)].slice(0, 0, 2)));
  }
  REQUIRE(stage.stats.batch_size == 4);
  REQUIRE(stage.stats.calls == 2);
  REQUIRE(stage.stats.input_shape == std::vector<std::int64_t>{3, 16, 16});
}

TEST_CASE("encode stage on a CPU: features leave in the stored type, in memory of their own") {
  // No output of a call may be alive at the next (EncodeStage::own_rows says why): the levels
  // handed on are copies in the stored type, not views of the encoder's outputs.
  Encoder encoder(testing::fixture("multi_scripted.pt"), c10::Device(c10::kCPU), Amp::kNone);
  CropQueue crops(kUnbounded);
  EncodedQueue encoded(kUnbounded);
  const std::vector<at::Tensor> inputs = push_crops(crops, 4);
  EncodeStage::Settings settings;
  settings.batch_size = 4;
  settings.dtype = StorageDtype::kFloat16;
  settings.kept_batches = 2;
  StagePriority priority(StageScheduling::kNormal);
  RunContext context;
  EncodeStage(crops, encoded, encoder, settings, priority, context).run();
  const std::vector<EncodedBatch> batches = drain(encoded);
  REQUIRE(batches.size() == 1);
  const std::vector<LevelSpec> levels = context.levels();
  const EncoderOutput alone = encoder.forward(at::stack(inputs));
  for (std::size_t k = 0; k < levels.size(); ++k) {
    CAPTURE(levels[k].name);
    const at::Tensor& rows = batches[0].levels[k];
    REQUIRE((rows.scalar_type() == at::kHalf));
    REQUIRE(rows.is_contiguous());
    REQUIRE(rows.storage().nbytes() == rows.nbytes());  // not a view into a larger output
    REQUIRE(at::allclose(rows.to(at::kFloat), alone.levels[std::size_t(levels[k].index)].to(at::kHalf).to(at::kFloat)));
  }
}

TEST_CASE("encode stage: the crops a batch lacks are waited for together, not one by one") {
  // A producer slower than the encoder: crops come one every 5 ms. Each wait for crops wakes the
  // encoder thread and its OpenMP team, so the encoder waits at most once per batch it fills
  // (taking crops singly, it waited for each of the first batch's).
  Encoder encoder(testing::fixture("multi_scripted.pt"), c10::Device(c10::kCPU), Amp::kNone);
  CropQueue crops(16);
  EncodedQueue encoded(kUnbounded);
  std::thread producer([&] {
    for (int i = 0; i < 17; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      CropItem item;
      item.key = CropKey{"g", "w" + std::to_string(i), Bounds{0, 0, 16, 16}};
      item.input = at::randn({3, 16, 16});
      crops.push(std::move(item));
    }
    crops.close();
  });
  EncodeStage::Settings settings;
  settings.batch_size = 8;
  StagePriority priority(StageScheduling::kNormal);
  RunContext context;
  EncodeStage stage(crops, encoded, encoder, settings, priority, context);
  stage.run();
  producer.join();
  REQUIRE(stage.stats.calls == 3);  // 8, 8 and the last crop padded to 8
  REQUIRE(drain(encoded).size() == 3);
  CHECK(stage.stats.waits >= 1);  // the first crop comes 5 ms after the start
  CHECK(stage.stats.waits <= stage.stats.calls);
  CHECK(stage.stats.wait_seconds > 0);
}

TEST_CASE("convert stage alone: rows in the storage dtype with their labels; NaN features name crop and level") {
  RunContext context;
  LevelSpec spec;
  spec.name = "feat";
  spec.row_shape = {2, 3};
  context.set_levels({spec});
  LabelKinds labels;
  labels.has_class = true;
  StorageOptions storage;
  storage.dtype = StorageDtype::kFloat16;
  const StagePriority priority(StageScheduling::kNormal);
  auto batch_of = [](at::Tensor level) {
    EncodedBatch batch;
    for (std::int64_t i = 0; i < level.size(0); ++i) {
      CropItem item;
      item.key = CropKey{"g", "w" + std::to_string(i), Bounds{0, 0, 8, 8}};
      item.split = "train";
      item.hash = std::uint64_t(100 + i);
      item.label_class = i % 2;
      batch.items.push_back(item);
    }
    batch.levels = {level};
    return batch;
  };
  {
    EncodedQueue in(kUnbounded);
    RowQueue out(kUnbounded);
    const at::Tensor level = at::randn({3, 2, 3});
    in.push(batch_of(level));
    in.close();
    ConvertStage stage(in, out, storage, false, labels, context, priority);
    stage.run();
    const std::vector<RowBatch> rows = drain(out);
    REQUIRE(rows.size() == 1);
    REQUIRE(at::equal(rows[0].levels[0], level.to(at::kHalf)));
    REQUIRE(rows[0].windows == std::vector<std::string>{"w0", "w1", "w2"});
    REQUIRE(rows[0].pixel_hashes == std::vector<std::uint64_t>{100, 101, 102});
    REQUIRE(at::equal(rows[0].label_class, at::tensor(std::vector<std::int64_t>{0, 1, 0}, at::kLong)));
    REQUIRE(rows[0].row_checksums.size() == 1);  // computed here, off the I/O thread
    REQUIRE(stage.feature_bytes == 3 * 2 * 3 * 2);
  }
  EncodedQueue in(kUnbounded);
  RowQueue out(kUnbounded);
  at::Tensor level = at::randn({3, 2, 3});
  level[1][1][2] = std::numeric_limits<float>::quiet_NaN();
  in.push(batch_of(level));
  in.close();
  ConvertStage stage(in, out, storage, false, labels, context, priority);
  try {
    stage.run();
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    const std::string message = e.what();
    REQUIRE(message.find("level feat of crop g/w1") != std::string::npos);
    REQUIRE(message.find("--allow-nonfinite") != std::string::npos);
  }
}

TEST_CASE("the window queue holds two batches of crops, and at least two windows") {
  CHECK(raw_queue_windows(64, 1) == 128);   // one crop per window: two batches of windows
  CHECK(raw_queue_windows(64, 4) == 32);
  CHECK(raw_queue_windows(64, 48) == 2);    // windows of many crops: two, as before
  CHECK(raw_queue_windows(64, 1000) == 2);
  CHECK(raw_queue_windows(4, 0) == 8);      // no window with crops: counted as one crop each
}

TEST_CASE("crops normalised into batch slots: an encoder that changes its input in place gets each crop once") {
  // The encoder's batches are views of the prep stage's slots; the batch-size trials (auto) must
  // not hand the same slots to the encoder before the batch that is stored.
  testing::TempDir dir;
  PrecomputeOptions in_place = small_run(dir, dir.file("in_place.h5"));
  in_place.encoder = testing::fixture("in_place.pt");
  in_place.batch_size = "auto";
  const PrecomputeSummary a = run_precompute(plan_precompute(in_place));
  // The reference runs at the batch size auto chose (a timing decision): features may differ in
  // the last bit between batch sizes.
  PrecomputeOptions doubled = in_place;
  doubled.encoder = testing::fixture("doubled.pt");
  doubled.out = dir.file("doubled.h5");
  doubled.batch_size = std::to_string(a.batch_size);
  run_precompute(plan_precompute(doubled));
  REQUIRE(a.batch_size_trials.size() >= 2);
  REQUIRE(a.crops_computed == 7 * 4);
  const CacheFileReader got(in_place.out), want(doubled.out);
  testing::require_same_rows(got.read_rows(0, got.rows()), want.read_rows(0, want.rows()));
}

TEST_CASE("the serial executor writes the cache the threaded one writes, bit for bit") {
  testing::TempDir dir;
  const PrecomputeOptions threaded_options = small_run(dir, dir.file("threaded.h5"));
  PrecomputeOptions serial_options = threaded_options;
  serial_options.out = dir.file("serial.h5");
  const PrecomputeSummary threaded = run_precompute(plan_precompute(threaded_options));
  PrecomputeHooks serial_hooks;
  serial_hooks.serial = true;
  const PrecomputeSummary serial = run_precompute(plan_precompute(serial_options), serial_hooks);
  REQUIRE(serial.crops_computed == threaded.crops_computed);
  REQUIRE(serial.crops_computed == 7 * 4);
  REQUIRE(serial.encoder_calls == threaded.encoder_calls);
  const CacheFileReader a(dir.file("threaded.h5")), b(dir.file("serial.h5"));
  REQUIRE(a.rows() == b.rows());
  testing::require_same_rows(b.read_rows(0, b.rows()), a.read_rows(0, a.rows()));
  // A rerun through the serial executor computes nothing.
  const PrecomputeSummary rerun = run_precompute(plan_precompute(serial_options), serial_hooks);
  REQUIRE(rerun.crops_computed == 0);
  REQUIRE(rerun.crops_skipped == 7 * 4);
}

TEST_CASE("a compressed cache's rows get their checksums off the I/O thread, like an uncompressed one's") {
  testing::TempDir dir;
  for (const char* compression : {"none", "gzip"}) {
    CAPTURE(compression);
    PrecomputeOptions o = small_run(dir, dir.file(std::string("c-") + compression + ".h5"));
    o.compression = compression;
    o.batch_size = "8";
    const PrecomputeSummary s = run_precompute(plan_precompute(o));
    REQUIRE(s.crops_computed == 7 * 4);
    // Every whole chunk of the file being built came with its rows' checksums.
    REQUIRE(s.chunks_checksummed_on_io_thread == 0);
    const CacheFileReader reader(o.out);
    REQUIRE(reader.storage().compression.to_string() == Compression::parse(compression).to_string());
    REQUIRE(reader.rows() == 7 * 4);
  }
}

}  // TEST_SUITE
