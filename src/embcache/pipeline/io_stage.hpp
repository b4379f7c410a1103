// Stage 1 of precompute, the only thread that touches HDF5: reads windows into the raw queue and
// writes finished rows from the row queue into the cache. Reading comes first (the encoder waits
// for the next windows, while finished rows can wait in their bounded queue), and a large batch
// is written chunk by chunk with reads in between, so the next windows never wait for a whole
// batch's write.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>

#include "embcache/core/clock.hpp"
#include "embcache/core/progress.hpp"
#include "embcache/pipeline/core_sharing.hpp"
#include "embcache/pipeline/run_context.hpp"
#include "embcache/pipeline/stage_items.hpp"
#include "embcache/store/cache_store.hpp"

namespace embcache {

class IoStage {
 public:
  // `done_elsewhere` counts crops that need no write (cached), for the progress line.
  IoStage(WindowSource& source, RawQueue& raw, RowQueue& rows, CacheStore& store, RunContext& context,
          const StagePriority& priority, Progress& progress, const std::atomic<std::int64_t>& done_elsewhere);

  // The threaded executor: reads and writes, interleaved, until every row is written.
  void run();
  // The serial executor: every window into the raw queue (unbounded there), which it closes.
  void read_all();
  // The serial executor: every row batch of the (closed) row queue into the cache.
  void write_all();

  StageTime read_time, write_time;
  std::atomic<std::int64_t> rows_written{0};
  std::atomic<bool> failed_writing{false};  // the cache's uncommitted rows are not to be trusted
  std::atomic<bool> finished{false};        // every row is written

 private:
  // Reads windows while the raw queue has room; closes it after the last window or on a stop.
  void read_ahead();
  // `cpu`: this thread's, charging read_time; the write's CPU goes to write_time.
  void write(const RowBatch& rows, CpuLedger& cpu);
  void wait_for_work();

  WindowSource& source_;
  RawQueue& raw_;
  RowQueue& rows_;
  CacheStore& store_;
  RunContext& context_;
  const StagePriority& priority_;
  bool normal_now_ = true;  // this thread's scheduling (threads start at normal), for priority_.follow
  Progress& progress_;
  const std::atomic<std::int64_t>& done_elsewhere_;
  std::size_t next_window_ = 0;
  bool reading_done_ = false;
  bool levels_set_ = false;
  std::exception_ptr read_error_;  // a read that failed between two chunks of a batch
  std::mutex wake_mutex_;
  std::condition_variable wake_;
};

}  // namespace embcache
