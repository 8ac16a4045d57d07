// memcpy for tensor bytes, without rep movsb's short-distance stall.
//
// glibc copies a few KiB to about a MiB with `rep movsb`, which on AMD Zen runs 10-20x slower when the
// destination lies less than 16 bytes ahead of the source modulo 4 KiB, and slower still at 16-24 bytes
// (docs/decisions/direct-allreduce-within-a-host.md). Where tensors are packed back to back into a
// staging or fusion buffer, that distance is whatever the sizes before them make it, so some batches hit it on
// every piece. Below 1 MiB, CopyBytes moves 32-byte vectors instead (AVX2, checked at run time), as fast as
// memcpy at every other distance; larger copies, and other CPUs, go to memcpy.
#pragma once
#include <cstddef>

namespace hvdlite {

// dst and src must not overlap.
void CopyBytes(void *dst, const void *src, size_t bytes);

}  // namespace hvdlite
