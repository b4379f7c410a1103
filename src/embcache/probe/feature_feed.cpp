#include "embcache/probe/feature_feed.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "embcache/core/clock.hpp"
#include "embcache/core/error.hpp"
#include "embcache/core/bounded_queue.hpp"
#include "embcache/store/int8_quantization.hpp"

namespace embcache {
namespace {


// One column's rows: values, and for quantized columns their int8 scales.
struct Part {
  at::Tensor values, scales;
  Part select(const at::Tensor& rows) const {
    return {values.index_select(0, rows), scales.defined() ? scales.index_select(0, rows) : at::Tensor()};
  }
};

Part cat_parts(const std::vector<Part>& parts) {
  if (parts.size() == 1) return parts.front();
  std::vector<at::Tensor> values, scales;
  for (const auto& p : parts) {
    values.push_back(p.values);
    if (p.scales.defined()) scales.push_back(p.scales);
  }
  return {at::cat(values), scales.empty() ? at::Tensor() : at::cat(scales)};
}

struct CpuBatch {
  std::vector<Part> columns;
  at::Tensor ids;
};

// Split rows that lie in consecutive chunk-aligned blocks, read with one call per column.
struct Span {
  int cache = 0;
  std::int64_t start = 0, count = 0;
  std::vector<std::int64_t> offsets;  // split rows within the span, relative to start
  std::vector<std::int64_t> ids;      // their split-local ids
};

std::vector<Span> make_spans(const ProbeData& data, const SplitRows& split, std::int64_t max_blocks) {
  std::vector<Span> spans;
  std::int64_t id = 0;
  for (std::size_t c = 0; c < split.rows.size(); ++c) {
    const CacheReader& cache = *data.caches()[c];
    const std::int64_t r_per_chunk = cache.chunk_rows();
    const auto& rows = split.rows[c];
    std::size_t i = 0;
    while (i < rows.size()) {
      // A span starts at the chunk of its first row and stays within one part of the cache, so
      // that every read touches whole chunks of one file.
      Span span;
      span.cache = int(c);
      span.start = cache.chunk_around(rows[i]).first;
      const std::int64_t limit = std::min(span.start + max_blocks * r_per_chunk, cache.run_end(rows[i]));
      while (i < rows.size() && rows[i] < limit) {
        span.offsets.push_back(rows[i] - span.start);
        span.ids.push_back(id++);
        ++i;
      }
      span.count = std::min(limit, cache.chunk_around(span.start + span.offsets.back()).second) - span.start;
      spans.push_back(std::move(span));
    }
  }
  return spans;
}

// Reads one column of rows [start, start + count) and keeps the rows at `offsets`. Levels are
// de-quantised here unless the column stays quantized, then pooled over space (pooled columns)
// and time (temporal levels), in that order, as the exported head does.
Part read_column(const ProbeData& data, const FeedColumn& column, const Span& span, std::int64_t* bytes_read) {
  const auto& cache = *data.caches()[span.cache];
  if (column.level.empty()) {
    at::Tensor block = column.pixel_values ? cache.read_pixel_values(span.start, span.count)
                                           : cache.read_masks(span.start, span.count);
    *bytes_read += std::int64_t(block.nbytes());
    if (std::int64_t(span.offsets.size()) != span.count) block = block.index_select(0, at::tensor(span.offsets, at::kLong));
    return {block, at::Tensor()};
  }
  const LevelSpec& level = data.level(column.level);
  Part part{cache.read_level(level, span.start, span.count), at::Tensor()};
  if (cache.storage().dtype == StorageDtype::kInt8) part.scales = cache.read_scales(level, span.start, span.count);
  *bytes_read += std::int64_t(part.values.nbytes()) + (part.scales.defined() ? std::int64_t(part.scales.nbytes()) : 0);
  if (std::int64_t(span.offsets.size()) != span.count) part = part.select(at::tensor(span.offsets, at::kLong));
  if (column.quantized) return part;
  at::Tensor x;
  if (part.scales.defined() && column.pooled && level.is_map()) {
    // A scale is constant over H x W: pool the int8 values, then scale (one multiply per channel).
    x = part.values.to(at::kFloat).mean({part.values.dim() - 2, part.values.dim() - 1}) * part.scales;
  } else {
    x = part.scales.defined() ? dequantize_int8(part.values, part.scales) : part.values;
    if (column.pooled && level.is_map()) x = x.to(at::kFloat).mean({x.dim() - 2, x.dim() - 1});
  }
  if (column.temporal) x = pool_time(x.to(at::kFloat), column.temporal_pool);
  if (column.pooled) x = x.to(at::kFloat);
  return {x, at::Tensor()};
}

// Bytes of one row as stored in the cache (what a stream read brings in before pooling).
std::int64_t stored_row_bytes(const ProbeData& data, const FeedColumn& column) {
  if (column.level.empty()) return column.resident_row_bytes;
  return row_feature_bytes({data.level(column.level)}, data.caches().front()->storage().dtype);
}

// Features and per-pixel values to float32 (int8 features de-quantised, where they are), masks
// to int64 (class ids for the loss).
at::Tensor widen(const Part& p, bool is_mask) {
  if (p.scales.defined()) return dequantize_int8(p.values, p.scales);
  return p.values.to(is_mask && !p.values.is_floating_point() ? at::kLong : at::kFloat);
}

Part pinned(const Part& p) { return {p.values.pin_memory(), p.scales.defined() ? p.scales.pin_memory() : at::Tensor()}; }

}  // namespace

const EnumTable<FeedTier>& feed_tiers() {
  static const EnumTable<FeedTier> table{{FeedTier::kGpu, "gpu"}, {FeedTier::kHost, "host"}, {FeedTier::kStream, "stream"}};
  return table;
}

const char* tier_name(FeedTier tier) { return feed_tiers().name(tier); }

nlohmann::json FeedStats::to_json(FeedTier tier) const {
  nlohmann::json j;
  j["tier"] = tier_name(tier);
  j["bytes_resident"] = bytes_resident;
  j["bytes_read"] = bytes_read;
  j["read_mb_per_s"] = read_seconds > 0 ? double(bytes_read) / 1e6 / read_seconds : 0.0;
  j["wait_seconds"] = wait_seconds;
  j["batches"] = batches;
  j["prefetch_hit_rate"] = batches > 0 ? double(batches_ready) / double(batches) : 0.0;
  if (tier == FeedTier::kStream) {
    j["block_row_utilization"] = rows_read > 0 ? double(rows_used) / double(rows_read) : 0.0;
  }
  return j;
}

FeedColumn level_column(const ProbeData& data, const LevelSpec& level, bool pooled, TemporalPool temporal_pool) {
  FeedColumn column;
  column.level = level.name;
  column.pooled = pooled || !level.is_map();
  column.temporal = level.temporal();
  column.temporal_pool = temporal_pool;
  const StorageDtype dtype = data.caches().front()->storage().dtype;
  const std::vector<std::int64_t> shape = level.pooled_time_shape();  // [C, H, W] or [C]
  if (column.pooled) {
    column.row_shape = {shape.at(0)};
    column.resident_row_bytes = 4 * shape[0];
  } else {
    column.row_shape = shape;
    // A time axis is pooled on load, in float32; int8 maps stay int8 (with a scale per channel).
    column.quantized = dtype == StorageDtype::kInt8 && !column.temporal;
    const std::int64_t elems = shape[0] * shape[1] * shape[2];
    column.resident_row_bytes = column.quantized ? elems + 4 * shape[0]
                                : column.temporal ? 4 * elems
                                                  : elems * std::int64_t(element_size(dtype));
  }
  return column;
}

FeedColumn mask_column(const ProbeData& data) {
  FeedColumn column;
  column.pixel_values = data.pixel_values();
  column.row_shape = data.mask_shape();
  column.resident_row_bytes = 4 * column.row_shape.at(0) * column.row_shape.at(1);
  return column;
}

std::int64_t resident_row_bytes(const std::vector<FeedColumn>& columns) {
  std::int64_t total = 0;
  for (const auto& c : columns) total += c.resident_row_bytes;
  return total;
}

struct FeatureFeed::Impl {
  const ProbeData& data;
  int split;
  std::vector<FeedColumn> columns;
  FeedTier tier;
  c10::Device device;
  std::int64_t batch_size;
  std::int64_t buffer_rows = 0;
  std::int64_t n = 0;          // rows a pass visits
  std::int64_t split_rows = 0;  // rows of the split (held by the resident tiers)
  at::Tensor subset;           // restrict_rows: the split-local rows a pass visits; undefined = all
  std::vector<Span> all_blocks;  // stream tier: every block of the split
  std::vector<Part> resident;  // resident tiers: one per column
  at::Tensor targets;                // on the device
  std::vector<Span> blocks;          // stream tier: chunk-aligned blocks
  FeedStats stats;

  // One pass in flight.
  at::Tensor order;         // resident tiers: the pass's row order
  at::Tensor order_device;  // gpu tier: the same order, copied to the device once per pass
  std::int64_t cursor = 0;
  std::unique_ptr<BoundedQueue<CpuBatch>> queue;
  std::thread producer;
  std::atomic<bool> stop{false};
  std::exception_ptr error;

  Impl(const ProbeData& d, int s, std::vector<FeedColumn> cols, FeedTier t, c10::Device dev, std::int64_t b)
      : data(d), split(s), columns(std::move(cols)), tier(t), device(dev), batch_size(b) {}

  bool on_cuda() const { return device.is_cuda(); }

  void load_resident() {
    const auto t0 = Clock::now();
    const SplitRows& rows = split == 0 ? data.train() : split == 1 ? data.val() : data.test();
    const bool pin = on_cuda() && tier == FeedTier::kHost;
    for (const auto& column : columns) {
      std::vector<std::int64_t> shape{split_rows};
      shape.insert(shape.end(), column.row_shape.begin(), column.row_shape.end());
      const auto dtype = column.level.empty() ? (column.pixel_values ? at::kFloat : at::kInt)
                         : column.pooled || column.temporal ? at::kFloat
                                                            : torch_type(data.caches().front()->storage().dtype);
      const auto options = at::TensorOptions().pinned_memory(pin);
      Part part{at::empty(shape, options.dtype(dtype)), at::Tensor()};
      if (column.quantized) part.scales = at::empty({split_rows, column.row_shape.at(0)}, options.dtype(at::kFloat));
      resident.push_back(std::move(part));
    }
    std::int64_t at_row = 0;
    for (const Span& span : make_spans(data, rows, 16)) {
      for (std::size_t c = 0; c < columns.size(); ++c) {
        const Part part = read_column(data, columns[c], span, &stats.bytes_read);
        resident[c].values.narrow(0, at_row, part.values.size(0)).copy_(part.values);
        if (part.scales.defined()) resident[c].scales.narrow(0, at_row, part.scales.size(0)).copy_(part.scales);
      }
      at_row += std::int64_t(span.ids.size());
    }
    stats.read_seconds += seconds_since(t0);
    for (auto& r : resident) {
      stats.bytes_resident += std::int64_t(r.values.nbytes()) + (r.scales.defined() ? std::int64_t(r.scales.nbytes()) : 0);
      if (tier == FeedTier::kGpu) {
        r.values = r.values.to(device);
        if (r.scales.defined()) r.scales = r.scales.to(device);
      }
    }
  }

  void finish_pass() {
    stop = true;
    if (queue) queue->close();
    if (producer.joinable()) producer.join();
    queue.reset();
    stop = false;
  }

  void run_producer(const std::function<void()>& body) {
    queue = std::make_unique<BoundedQueue<CpuBatch>>(3);
    error = nullptr;
    producer = std::thread([this, body] {
      try {
        body();
      } catch (...) {
        error = std::current_exception();
      }
      queue->close();
    });
  }

  // Host tier: gathers rows of the resident tensors ahead of the trainer.
  void produce_host() {
    const bool pin = on_cuda();
    for (std::int64_t start = 0; start < n && !stop; start += batch_size) {
      CpuBatch batch;
      batch.ids = order.narrow(0, start, std::min(batch_size, n - start));
      for (std::size_t c = 0; c < columns.size(); ++c) {
        std::vector<std::int64_t> shape{batch.ids.size(0)};
        shape.insert(shape.end(), columns[c].row_shape.begin(), columns[c].row_shape.end());
        Part out{at::empty(shape, resident[c].values.options().pinned_memory(pin)), at::Tensor()};
        at::index_select_out(out.values, resident[c].values, 0, batch.ids);
        if (resident[c].scales.defined()) {
          out.scales = at::empty({batch.ids.size(0), resident[c].scales.size(1)}, resident[c].scales.options().pinned_memory(pin));
          at::index_select_out(out.scales, resident[c].scales, 0, batch.ids);
        }
        // On the CPU the "device" is this machine: widening here overlaps it with training.
        batch.columns.push_back(pin ? out : Part{widen(out, columns[c].level.empty()), at::Tensor()});
      }
      if (!queue->push(std::move(batch))) return;
    }
  }

  // Stream tier: reads chunk-aligned blocks in a (shuffled) order into a bounded buffer,
  // shuffles the buffer and emits batches; rows left over mix with the next fill.
  void produce_stream(bool shuffle, std::uint64_t seed) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x5eedb10c);
    std::vector<std::size_t> block_order(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) block_order[i] = i;
    if (shuffle) {
      const at::Tensor perm = at::randperm(std::int64_t(blocks.size()), gen, at::kLong);
      for (std::size_t i = 0; i < blocks.size(); ++i) block_order[i] = std::size_t(perm[std::int64_t(i)].item<std::int64_t>());
    }
    std::vector<Part> buffer(columns.size());
    at::Tensor buffer_ids;
    std::size_t next_block = 0;
    while (!stop) {
      std::vector<std::vector<Part>> parts(columns.size());
      std::vector<at::Tensor> id_parts;
      std::int64_t buffered = buffer_ids.defined() ? buffer_ids.size(0) : 0;
      if (buffered) {
        for (std::size_t c = 0; c < columns.size(); ++c) parts[c].push_back(buffer[c]);
        id_parts.push_back(buffer_ids);
      }
      while (next_block < blocks.size() && (buffered < buffer_rows || buffered < batch_size) && !stop) {
        const Span& span = blocks[block_order[next_block++]];
        const auto t0 = Clock::now();
        for (std::size_t c = 0; c < columns.size(); ++c) parts[c].push_back(read_column(data, columns[c], span, &stats.bytes_read));
        stats.read_seconds += seconds_since(t0);
        stats.rows_read += span.count;
        stats.rows_used += std::int64_t(span.ids.size());
        id_parts.push_back(at::tensor(span.ids, at::kLong));
        buffered += std::int64_t(span.ids.size());
      }
      if (buffered == 0) return;
      at::Tensor ids = at::cat(id_parts);
      for (std::size_t c = 0; c < columns.size(); ++c) {
        buffer[c] = cat_parts(parts[c]);
        parts[c].clear();  // the blocks are in the buffer now: free them before emitting
      }
      // Batches gather rows of the buffer in a random order; the buffer itself is not permuted.
      const at::Tensor order = shuffle ? at::randperm(buffered, gen, at::kLong) : at::arange(buffered, at::kLong);
      const bool last = next_block >= blocks.size();
      const std::int64_t emit = last ? buffered : buffered / batch_size * batch_size;
      for (std::int64_t start = 0; start < emit && !stop; start += batch_size) {
        const at::Tensor pick = order.narrow(0, start, std::min(batch_size, emit - start));
        CpuBatch batch;
        batch.ids = ids.index_select(0, pick);
        for (std::size_t c = 0; c < columns.size(); ++c) {
          const Part part = buffer[c].select(pick);
          batch.columns.push_back(on_cuda() ? pinned(part) : Part{widen(part, columns[c].level.empty()), at::Tensor()});
        }
        if (!queue->push(std::move(batch))) return;
      }
      if (last) return;
      // Keep the rows not emitted (fewer than one batch) for the next fill; the rest is freed.
      const at::Tensor rest = order.narrow(0, emit, buffered - emit);
      buffer_ids = ids.index_select(0, rest);
      for (auto& b : buffer) b = b.select(rest);
    }
  }

  FeedBatch to_device(CpuBatch cpu) {
    FeedBatch batch;
    batch.ids = cpu.ids;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const Part& p = cpu.columns[c];
      if (!on_cuda()) {
        batch.columns.push_back(p.values);  // widened by the producer
        continue;
      }
      const Part on_device{p.values.to(device, /*non_blocking=*/true),
                           p.scales.defined() ? p.scales.to(device, /*non_blocking=*/true) : at::Tensor()};
      batch.columns.push_back(widen(on_device, columns[c].level.empty()));
    }
    if (targets.defined()) batch.targets = targets.index_select(0, on_cuda() ? cpu.ids.to(device, true) : cpu.ids);
    return batch;
  }
};

FeatureFeed::FeatureFeed(const ProbeData& data, int split, std::vector<FeedColumn> columns, FeedTier tier,
                         c10::Device device, std::int64_t batch_size, std::int64_t stream_buffer_bytes)
    : impl_(std::make_unique<Impl>(data, split, std::move(columns), tier, device, batch_size)) {
  const SplitRows& rows = split == 0 ? data.train() : split == 1 ? data.val() : data.test();
  impl_->n = impl_->split_rows = rows.size();
  if (data.targets(split).defined()) impl_->targets = data.targets(split).to(device);
  if (tier == FeedTier::kStream) {
    impl_->blocks = impl_->all_blocks = make_spans(data, rows, 1);
    std::int64_t raw_bytes = 0;
    for (const auto& c : impl_->columns) raw_bytes += stored_row_bytes(data, c);
    impl_->buffer_rows = std::max<std::int64_t>(batch_size, stream_buffer_bytes / std::max<std::int64_t>(1, raw_bytes));
  } else {
    impl_->load_resident();
  }
}

FeatureFeed::~FeatureFeed() { impl_->finish_pass(); }

std::int64_t FeatureFeed::rows() const { return impl_->n; }
std::int64_t FeatureFeed::batches_per_epoch() const { return (impl_->n + impl_->batch_size - 1) / impl_->batch_size; }
const FeedStats& FeatureFeed::stats() const { return impl_->stats; }

void FeatureFeed::restrict_rows(const std::vector<std::int64_t>& rows) {
  Impl& m = *impl_;
  m.finish_pass();
  if (rows.empty() || std::int64_t(rows.size()) == m.split_rows) {
    m.subset = at::Tensor();
    m.n = m.split_rows;
    m.blocks = m.all_blocks;
    return;
  }
  m.subset = at::tensor(rows, at::kLong);
  m.n = std::int64_t(rows.size());
  if (m.tier != FeedTier::kStream) return;
  std::vector<bool> keep(std::size_t(m.split_rows), false);
  for (auto r : rows) keep.at(std::size_t(r)) = true;
  m.blocks.clear();
  for (const Span& span : m.all_blocks) {
    Span kept{span.cache, span.start, span.count, {}, {}};
    for (std::size_t i = 0; i < span.ids.size(); ++i) {
      if (!keep[std::size_t(span.ids[i])]) continue;
      kept.offsets.push_back(span.offsets[i]);
      kept.ids.push_back(span.ids[i]);
    }
    if (!kept.ids.empty()) m.blocks.push_back(std::move(kept));
  }
}

void FeatureFeed::start(bool shuffle, std::uint64_t seed) {
  Impl& m = *impl_;
  m.finish_pass();
  m.cursor = 0;
  if (m.tier == FeedTier::kStream) {
    m.run_producer([&m, shuffle, seed] { m.produce_stream(shuffle, seed); });
    return;
  }
  if (shuffle) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    m.order = at::randperm(m.n, gen, at::kLong);
  } else {
    m.order = at::arange(m.n, at::kLong);
  }
  if (m.subset.defined()) m.order = m.subset.index_select(0, m.order);
  if (m.tier == FeedTier::kGpu) m.order_device = m.order.to(m.device);
  if (m.tier == FeedTier::kHost) m.run_producer([&m] { m.produce_host(); });
}

std::optional<FeedBatch> FeatureFeed::next() {
  Impl& m = *impl_;
  if (m.tier == FeedTier::kGpu) {
    if (m.cursor >= m.n) return std::nullopt;
    const std::int64_t len = std::min(m.batch_size, m.n - m.cursor);
    FeedBatch batch;
    batch.ids = m.order.narrow(0, m.cursor, len);
    const at::Tensor ids = m.order_device.narrow(0, m.cursor, len);  // no host traffic per batch
    for (std::size_t c = 0; c < m.columns.size(); ++c) batch.columns.push_back(widen(m.resident[c].select(ids), m.columns[c].level.empty()));
    if (m.targets.defined()) batch.targets = m.targets.index_select(0, ids);
    m.cursor += len;
    ++m.stats.batches;
    ++m.stats.batches_ready;
    return batch;
  }
  if (!m.queue) return std::nullopt;
  std::optional<CpuBatch> cpu = m.queue->try_pop();
  if (cpu) {
    ++m.stats.batches_ready;
  } else {
    const auto t0 = Clock::now();
    cpu = m.queue->pop();
    m.stats.wait_seconds += seconds_since(t0);
  }
  if (!cpu) {
    m.finish_pass();
    if (m.error) std::rethrow_exception(m.error);
    return std::nullopt;
  }
  ++m.stats.batches;
  return m.to_device(std::move(*cpu));
}

}  // namespace embcache
