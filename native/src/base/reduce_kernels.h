// Element-wise kernels of the reductions: dst = dst (op) src, scaling, and dividing for averages.
// Plain loops over restrict pointers so the compiler vectorises them; half types go through float32.
#pragma once
#include <cstdint>

#include "base/types.h"

namespace hvdlite {

// dst[i] = dst[i] (op) src[i]; kAverage reduces as kSum (the division happens once, at the end).
void ReduceInto(void *dst, const void *src, int64_t count, DataType dtype, ReduceOp op);
// dst[i] = a[i] (op) b[i]; dst may be a, otherwise it overlaps neither input.
void ReduceTo(void *dst, const void *a, const void *b, int64_t count, DataType dtype, ReduceOp op);

// dst[i] = src[i] * factor; dst may equal src. Integers are scaled in double and truncated back (Horovod's
// rule); bool is copied unscaled.
void ScaleCopy(void *dst, const void *src, int64_t count, DataType dtype, double factor);

// out = reduced with postscale and the average's division applied (once, after the reduction); out may
// equal reduced.
void FinishReduction(void *out, const void *reduced, int64_t count, DataType dtype, ReduceOp op, double postscale,
                     int32_t set_size);

// Integer average: dst[i] /= divisor, truncating toward zero.
void DivideIntegers(void *buffer, int64_t count, DataType dtype, int64_t divisor);

}  // namespace hvdlite
