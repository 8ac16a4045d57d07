// The interface every all-reduce algorithm implements, and what it runs on.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "../types.h"

namespace hvdlite {

struct CommContext {
  MPI_Comm comm;
  int32_t rank;
  int32_t size;
};

// One tensor of a fused batch, as the ring sees the batch: tensors laid end to end in one virtual buffer,
// each read from its own input and written to its own output (which may be the input).
struct BufferPiece {
  const uint8_t *input;
  uint8_t *output;
  int64_t bytes;
};

class AllreduceAlgorithm {
 public:
  virtual ~AllreduceAlgorithm() = default;
  virtual const char *name() const = 0;
  // In place: buffer holds this rank's input and ends with the reduction, bitwise equal on all ranks.
  // kAverage reduces as a sum; the caller divides.
  virtual void Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) = 0;
  // input -> output (they may be the same buffer). By default: copy, then in place; algorithms that can
  // read the input where they first need it skip that copy.
  virtual void RunFrom(const CommContext &ctx, const void *input, void *output, int64_t count, DataType dtype,
                       ReduceOp op) {
    if (input != output) std::memcpy(output, input, static_cast<size_t>(count) * DataTypeSize(dtype));
    Run(ctx, output, count, dtype, op);
  }
};

}  // namespace hvdlite
