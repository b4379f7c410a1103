// The intra-op threads of k-NN votes and logreg fits, which are large matrix products.
#pragma once

#include "embcache/host/cpu_info.hpp"
#include "embcache/host/intra_op_threads.hpp"

namespace embcache {

// Every CPU this process may use, unless --threads (`threads_option` > 0) says otherwise, for the
// scope's life; the count before is restored after. LibTorch's default of one thread per physical
// core suits the epochs of small heads; where it counts fewer cores than the CPUs this process
// may use, k-NN votes ran at half speed under it.
class EveryCore {
 public:
  explicit EveryCore(int threads_option) {
    if (threads_option == 0) use_intra_op_threads(usable_cpus());
  }

 private:
  IntraOpThreadsScope restore_;
};

}  // namespace embcache
