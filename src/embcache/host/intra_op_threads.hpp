// LibTorch's intra-op thread count, set where it changes and only there.
#pragma once

namespace embcache {

// Sets LibTorch's intra-op thread count (at::set_num_threads) to `threads` unless this thread
// already runs with that many. Setting the count recreates LibTorch's pthreadpool in LibTorch
// 1.13 (Debian 12) even when it does not change, spinning for milliseconds on the cores the run
// needs; 2.6 (Debian 13) skips an unchanged count itself.
void use_intra_op_threads(int threads);

// Gives this thread back, on leaving the scope, the intra-op thread count it had on entering.
class IntraOpThreadsScope {
 public:
  IntraOpThreadsScope();
  ~IntraOpThreadsScope();
  IntraOpThreadsScope(const IntraOpThreadsScope&) = delete;
  IntraOpThreadsScope& operator=(const IntraOpThreadsScope&) = delete;

 private:
  int before_;
};

}  // namespace embcache
