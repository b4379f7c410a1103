// Heads trained by epochs (linear, mlp, conv, fpn, unet, pixel-shuffle, upernet): every train
// group makes one pass over its rows per epoch and every bank of the group steps on every batch,
// side by side on the cores the intra-op threads leave free (probe/bank_lanes.hpp); after each
// epoch, validation keeps each combination's best state, stops it early (--patience) or when its
// loss stops being finite. The best states are then tested by ProbePass::test_best_states.
#pragma once

#include <cstddef>

namespace embcache {

class ProbePass;

// Trains every combination of `pass` for --epochs; `lanes`: banks side by side (0: from the
// CPUs and the intra-op threads). Records history, timing and warnings in the pass.
void train_epochs(ProbePass& pass, std::size_t lanes);

}  // namespace embcache
