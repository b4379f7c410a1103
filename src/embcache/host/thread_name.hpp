// Names for embcache's own threads ("embcache io", "embcache read", ...), as top -H, perf and
// /proc/PID/task/*/comm show them. The benchmark (bench/thread_times.hpp) counts every unnamed
// thread as the encoder's: the calling thread and its OpenMP workers.
#pragma once

#include <pthread.h>

#include <cstddef>

namespace embcache {

// Names the calling thread. Linux refuses a name over 15 bytes without a word; here it does not
// compile.
template <std::size_t N>
void name_this_thread(const char (&name)[N]) {
  static_assert(N <= 16, "a thread name is at most 15 bytes");
  pthread_setname_np(pthread_self(), name);
}

}  // namespace embcache
