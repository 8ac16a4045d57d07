#include "collectives/allgather_executor.h"

namespace hvdlite {

std::string AllgatherExecutor::Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) {
  const CommContext ctx = ContextOf(set);
  const Response &response = *batch.parts.front();
  Entry &local = *locals[0];
  const Request &spec = response.spec;
  const int64_t row_bytes = local.request.RowElements() * static_cast<int64_t>(DataTypeSize(spec.dtype));
  std::vector<int> counts(ctx.size), displacements(ctx.size);
  int64_t total_rows = 0, offset = 0;
  for (int r = 0; r < ctx.size; ++r) {
    int64_t bytes = response.first_dims[r] * row_bytes;
    if (!FitsInt(bytes) || !FitsInt(offset)) return "allgather of tensor '" + spec.name + "' exceeds 2 GiB";
    counts[r] = static_cast<int>(bytes);
    displacements[r] = static_cast<int>(offset);
    offset += bytes;
    total_rows += response.first_dims[r];
  }
  CoreResults &results = *(local.results = std::make_unique<CoreResults>());
  results.output.resize(offset);
  MPI_Allgatherv(local.input, counts[ctx.rank], MPI_BYTE, results.output.data(), counts.data(),
                 displacements.data(), MPI_BYTE, ctx.comm);
  results.output_shape = local.request.shape;
  results.output_shape[0] = total_rows;
  return "";
}

}  // namespace hvdlite
