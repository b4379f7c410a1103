// --head logreg: the training split's pooled, standardised features gathered once per train
// group, then each bank's members (one per C) fitted by L-BFGS in increasing C, each starting
// from the previous solution (probe/logistic_regression.hpp); the fit counts as epoch 1 and is
// validated as one.
#pragma once

namespace embcache {

class ProbePass;

// Fits every combination of `pass` (all logreg) and validates it; records history and timing.
// The best states are then tested by ProbePass::test_best_states.
void fit_logregs(ProbePass& pass);

}  // namespace embcache
