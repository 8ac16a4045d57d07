// The interface every all-reduce algorithm implements, and what it runs on.
#pragma once
#include <mpi.h>

#include <cstdint>

#include "../types.h"

namespace hvdlite {

struct CommContext {
  MPI_Comm comm;
  int32_t rank;
  int32_t size;
};

class AllreduceAlgorithm {
 public:
  virtual ~AllreduceAlgorithm() = default;
  virtual const char *name() const = 0;
  // In place: buffer holds this rank's input and ends with the reduction, bitwise equal on all ranks.
  // kAverage reduces as a sum; the caller divides.
  virtual void Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) = 0;
};

}  // namespace hvdlite
