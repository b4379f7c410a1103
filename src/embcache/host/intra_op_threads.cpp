#include "embcache/host/intra_op_threads.hpp"

#include <ATen/Parallel.h>

namespace embcache {

void use_intra_op_threads(int threads) {
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
}

IntraOpThreadsScope::IntraOpThreadsScope() : before_(at::get_num_threads()) {}
IntraOpThreadsScope::~IntraOpThreadsScope() { use_intra_op_threads(before_); }

}  // namespace embcache
