// The MPI library's own MPI_Allreduce (best for small messages: tuned latency-optimal algorithms).
#pragma once
#include "algorithms/allreduce_algorithm.h"

namespace hvdlite {

class MpiAllreduce : public AllreduceAlgorithm {
 public:
  const char *name() const override { return "mpi"; }
  const char *timeline_phase() const override { return "MPI_ALLREDUCE"; }
  std::string Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) override;
  std::string RunFrom(const CommContext &ctx, const void *input, void *output, int64_t count, DataType dtype,
                      ReduceOp op) override;
};

}  // namespace hvdlite
