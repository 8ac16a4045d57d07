#include "mpi_allreduce.h"

#include <algorithm>
#include <climits>

#include "../mpi_types.h"

namespace hvdlite {

void MpiAllreduce::Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) {
  const MpiTypes &types = GlobalMpiTypes();
  MPI_Datatype datatype = types.Datatype(dtype);
  MPI_Op mpi_op = types.Op(dtype, op);
  auto *bytes = static_cast<uint8_t *>(buffer);
  const int64_t kMaxCount = INT_MAX / 2;  // MPI counts are ints
  for (int64_t start = 0; start < count; start += kMaxCount) {
    int n = static_cast<int>(std::min(kMaxCount, count - start));
    MPI_Allreduce(MPI_IN_PLACE, bytes + start * DataTypeSize(dtype), n, datatype, mpi_op, ctx.comm);
  }
}

}  // namespace hvdlite
