#include "algorithms/mpi_allreduce.h"

#include <algorithm>
#include <climits>

#include "base/mpi_types.h"

namespace hvdlite {

std::string MpiAllreduce::Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) {
  return RunFrom(ctx, buffer, buffer, count, dtype, op);
}

std::string MpiAllreduce::RunFrom(const CommContext &ctx, const void *input, void *output, int64_t count,
                                  DataType dtype, ReduceOp op) {
  const MpiTypes &types = GlobalMpiTypes();
  MPI_Datatype datatype = types.Datatype(dtype);
  MPI_Op mpi_op = types.Op(dtype, op);
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t kMaxCount = INT_MAX / 2;  // MPI counts are ints
  for (int64_t start = 0; start < count; start += kMaxCount) {
    int n = static_cast<int>(std::min(kMaxCount, count - start));
    void *out = static_cast<uint8_t *>(output) + start * element;
    const void *in = input == output ? MPI_IN_PLACE : static_cast<const uint8_t *>(input) + start * element;
    MPI_Allreduce(in, out, n, datatype, mpi_op, ctx.comm);
  }
  return "";
}

}  // namespace hvdlite
