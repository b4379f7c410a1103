#include "embcache/pipeline/io_stage.hpp"

#include <chrono>

#include "embcache/core/stop_request.hpp"
#include "embcache/h5/h5.hpp"

namespace embcache {

IoStage::IoStage(WindowSource& source, RawQueue& raw, RowQueue& rows, CacheStore& store, RunContext& context,
                 const StagePriority& priority, Progress& progress, const std::atomic<std::int64_t>& done_elsewhere)
    : source_(source), raw_(raw), rows_(rows), store_(store), context_(context), priority_(priority),
      progress_(progress), done_elsewhere_(done_elsewhere) {
  // This thread waits on two queues at once: both wake it through one condition variable.
  auto wake = [this] {
    { std::lock_guard<std::mutex> lock(wake_mutex_); }
    wake_.notify_all();
  };
  // Woken for each window the prep stage takes, the reader keeps pace with prep, which waits at
  // the stage gate while an encoder call runs: fewer, larger refills would read bursts of
  // windows past that gate, during the encoder's calls.
  raw_.set_listener(wake);
  rows_.set_listener(wake);
}

void IoStage::read_ahead() {
  const auto& windows = source_.windows();
  while (!reading_done_ && !read_error_) {
    // Each read, including those between the chunks of a write, waits out an encoder call, as
    // the stages' items do: a read burst that ran on into a call took slices of a core from the
    // encoder's threads at SCHED_IDLE, and stalled its parallel regions meanwhile.
    priority_.follow(normal_now_);
    if (stop_requested() || next_window_ >= windows.size()) {
      raw_.close();
      reading_done_ = true;
      return;
    }
    if (!raw_.has_space()) return;
    const StageStopwatch watch;
    RawWindow raw{next_window_, source_.read(next_window_)};
    watch.add_to(read_time);
    ++next_window_;
    raw_.push(std::move(raw));
  }
}

void IoStage::write(const RowBatch& rows, CpuLedger& cpu) {
  const StageStopwatch watch;
  const StageTime read_before = read_time;  // reads between chunks are read time
  cpu.charge_to(write_time);
  // Between two chunks the batch is half written: a read error waits until it is complete.
  auto read_between_chunks = [this, &cpu] {
    cpu.charge_to(read_time);
    try {
      read_ahead();
    } catch (...) {
      read_error_ = std::current_exception();
    }
    cpu.charge_to(write_time);
  };
  try {
    if (!levels_set_) {
      store_.set_levels(context_.levels());
      levels_set_ = true;
    }
    store_.append(rows, read_between_chunks);
  } catch (...) {
    failed_writing = true;
    throw;
  }
  cpu.charge_to(read_time);
  StageTime batch_time;
  watch.add_to(batch_time);
  write_time.wall += batch_time.wall - (read_time.wall - read_before.wall);
  rows_written += std::int64_t(rows.size());
  progress_.update(rows_written + done_elsewhere_);
  if (read_error_) std::rethrow_exception(read_error_);
}

void IoStage::wait_for_work() {
  std::unique_lock<std::mutex> lock(wake_mutex_);
  wake_.wait_for(lock, std::chrono::milliseconds(100), [&] {
    return context_.failed() || rows_.has_items() || rows_.drained() ||
           (!reading_done_ && (raw_.has_space() || stop_requested()));
  });
}

void IoStage::run() {
  CpuLedger cpu(read_time);
  h5::silence_errors_on_this_thread();
  while (!context_.failed()) {
    priority_.follow(normal_now_);
    read_ahead();
    if (auto rows = rows_.try_pop()) {
      write(*rows, cpu);
      continue;
    }
    if (rows_.drained()) {
      finished = true;
      return;
    }
    progress_.update(rows_written + done_elsewhere_);
    wait_for_work();
  }
}

void IoStage::read_all() {
  CpuLedger cpu(read_time);
  h5::silence_errors_on_this_thread();
  while (!reading_done_ && !context_.failed()) read_ahead();
}

void IoStage::write_all() {
  CpuLedger cpu(read_time);
  while (auto rows = rows_.try_pop()) write(*rows, cpu);
  finished = true;
}

}  // namespace embcache
