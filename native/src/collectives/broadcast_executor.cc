#include "collectives/broadcast_executor.h"

#include <algorithm>

#include "base/copy_bytes.h"
#include "base/progress_watchdog.h"

namespace hvdlite {

std::string BroadcastExecutor::Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) {
  const CommContext ctx = ContextOf(set);
  const Response &response = *batch.parts.front();
  Entry &local = *locals[0];
  const int64_t bytes = local.request.NumElements() * static_cast<int64_t>(DataTypeSize(response.spec.dtype));
  auto *out = static_cast<uint8_t *>(local.output);
  if (ctx.rank == response.spec.root_rank && local.output != local.input) CopyBytes(out, local.input, bytes);
  // In pieces, each a step of progress (progress_watchdog.h): one call for gigabytes could outlast its timeout.
  constexpr int64_t kPiece = 64 << 20;
  for (int64_t start = 0; start < bytes; start += kPiece) {
    MPI_Bcast(out + start, static_cast<int>(std::min(kPiece, bytes - start)), MPI_BYTE, response.spec.root_rank,
              ctx.comm);
    NoteProgress();
  }
  return "";
}

}  // namespace hvdlite
