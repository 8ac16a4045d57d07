#include "collectives/alltoall_executor.h"

namespace hvdlite {

std::string AlltoallExecutor::Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) {
  const CommContext ctx = ContextOf(set);
  const Response &response = *batch.parts.front();
  Entry &local = *locals[0];
  const Request &spec = local.request;
  const int64_t row_bytes = spec.RowElements() * static_cast<int64_t>(DataTypeSize(spec.dtype));
  std::vector<int32_t> send_rows = local.splits;
  if (send_rows.empty()) send_rows.assign(ctx.size, static_cast<int32_t>(spec.shape[0] / ctx.size));
  std::vector<int32_t> recv_rows(ctx.size);
  MPI_Alltoall(send_rows.data(), 1, MPI_INT32_T, recv_rows.data(), 1, MPI_INT32_T, ctx.comm);
  std::vector<int> send_counts(ctx.size), send_displs(ctx.size), recv_counts(ctx.size), recv_displs(ctx.size);
  int64_t send_offset = 0, recv_offset = 0, total_rows = 0;
  for (int r = 0; r < ctx.size; ++r) {
    int64_t sb = send_rows[r] * row_bytes, rb = recv_rows[r] * row_bytes;
    if (!FitsInt(send_offset + sb) || !FitsInt(recv_offset + rb)) {
      return "alltoall of tensor '" + response.spec.name + "' exceeds 2 GiB";
    }
    send_counts[r] = static_cast<int>(sb);
    send_displs[r] = static_cast<int>(send_offset);
    recv_counts[r] = static_cast<int>(rb);
    recv_displs[r] = static_cast<int>(recv_offset);
    send_offset += sb;
    recv_offset += rb;
    total_rows += recv_rows[r];
  }
  CoreResults &results = *(local.results = std::make_unique<CoreResults>());
  results.output.resize(recv_offset);
  MPI_Alltoallv(local.input, send_counts.data(), send_displs.data(), MPI_BYTE, results.output.data(),
                recv_counts.data(), recv_displs.data(), MPI_BYTE, ctx.comm);
  results.output_shape = spec.shape;
  results.output_shape[0] = total_rows;
  results.received_splits = std::move(recv_rows);
  return "";
}

}  // namespace hvdlite
