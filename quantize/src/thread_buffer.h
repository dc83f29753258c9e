// A per-thread scratch array, allocated on the thread's first use.
//
// Why not `thread_local T buf[N]`: an array in static TLS is part of every
// thread the process creates (gRPC's server threads, OpenMP's, the trainer's),
// and glibc zero-fills it at each thread's start whether or not the thread
// ever encodes. The codec's blocks of up to 80 KB made each new thread cost a
// 287 KB memset and its page faults, which was most of a ps request script's
// time (fuzz_ps_requests). A pointer costs 8 bytes of TLS instead.
#pragma once

#include <cstddef>
#include <memory>

namespace terngrad::quantize::detail {

// The calling thread's array of N elements of T, uninitialized at first and
// kept until the thread ends. Site is a type local to the caller, so that
// two call sites never share a buffer.
template <class T, size_t N, class Site>
T* thread_buffer() {
  thread_local std::unique_ptr<T[]> buffer;
  if (!buffer) buffer = std::make_unique_for_overwrite<T[]>(N);
  return buffer.get();
}

}  // namespace terngrad::quantize::detail
