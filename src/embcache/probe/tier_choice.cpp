#include "embcache/probe/tier_choice.hpp"

#include <string>

#include "embcache/core/error.hpp"
#include "embcache/core/parse.hpp"

namespace embcache {
namespace {

FeedTier resident_tier(const TierInputs& in, std::int64_t needed) {
  const bool automatic = in.request == TierRequest::kAuto;
  if (in.request == TierRequest::kGpu || (automatic && in.cuda && needed <= in.gpu_budget)) {
    if (needed > in.gpu_budget) {
      throw UsageError(OptionName{"tier"}, "gpu: the features need " + format_bytes(double(needed)) + " but --gpu-memory-budget is " +
                       format_bytes(double(in.gpu_budget)) + "; raise the budget or use --tier auto");
    }
    return FeedTier::kGpu;
  }
  if (in.request == TierRequest::kHost || (automatic && needed <= in.host_budget)) {
    if (needed > in.host_budget) {
      throw UsageError(OptionName{"tier"}, "host: the features need " + format_bytes(double(needed)) + " but --host-memory-budget is " +
                       format_bytes(double(in.host_budget)) + "; raise the budget or use --tier auto (streams from disk)");
    }
    return FeedTier::kHost;
  }
  return FeedTier::kStream;
}

}  // namespace

TierChoice choose_tier(const TierInputs& in) {
  TierChoice choice;
  choice.needed = in.row_bytes * in.rows;
  choice.tier = resident_tier(in, choice.needed);
  choice.val_tier = choice.tier;
  // Stream: a third of the host budget is the shuffle buffer; while it refills, the blocks read
  // and the buffer briefly coexist, and the rest covers queued batches.
  choice.buffer_bytes = in.host_budget / 3;
  if (choice.tier != FeedTier::kStream) return choice;
  const std::int64_t batch_bytes = in.row_bytes * in.batch_size * 8;
  if (batch_bytes > in.host_budget) {
    // Small data: holding it all takes less than streaming it would.
    const std::string advice = in.request == TierRequest::kAuto && choice.needed < batch_bytes
                                   ? "raise the budget to " + format_bytes(double(choice.needed)) +
                                         " (the features then stay in memory) or lower --batch-size"
                                   : "raise the budget or lower --batch-size";
    throw UsageError(OptionName{"host-memory-budget"}, format_bytes(double(in.host_budget)) + " is exhausted: streaming needs about " +
                     format_bytes(double(batch_bytes)) + " for a few batches of " + std::to_string(in.batch_size) +
                     " rows; " + advice);
  }
  // Validation runs every epoch, and its rows usually share blocks with train rows (a
  // --val-fraction carve, interleaved windows): streamed, it would read most of the cache again
  // each epoch. Held in memory when it takes at most a third of the budget; the stream shares the rest.
  const std::int64_t val_bytes = in.row_bytes * in.val_rows;
  if (val_bytes <= in.host_budget / 3 && batch_bytes <= in.host_budget - val_bytes) {
    choice.val_tier = FeedTier::kHost;
    choice.buffer_bytes = (in.host_budget - val_bytes) / 3;
  }
  return choice;
}

}  // namespace embcache
