#include "ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include "../reduce_kernels.h"

namespace hvdlite {

void RingAllreduce::Exchange(const CommContext &ctx, const uint8_t *send, int64_t send_bytes, uint8_t *recv,
                             int64_t recv_bytes, const uint8_t *reduce_with, DataType dtype, ReduceOp op) {
  const bool reduce = reduce_with != nullptr;
  const int right = (ctx.rank + 1) % ctx.size;
  const int left = (ctx.rank - 1 + ctx.size) % ctx.size;
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t segment = std::max(element, segment_bytes_ / element * element);
  if (reduce && static_cast<int64_t>(scratch_.size()) < recv_bytes) scratch_.resize(recv_bytes);
  uint8_t *landing = reduce ? scratch_.data() : recv;

  // Post every receive first (each segment has its own landing spot), then every send: the left
  // neighbour's sends can complete as soon as they start, whatever we are busy reducing.
  recv_requests_.clear();
  send_requests_.clear();
  for (int64_t offset = 0; offset < recv_bytes; offset += segment) {
    recv_requests_.emplace_back();
    MPI_Irecv(landing + offset, static_cast<int>(std::min(segment, recv_bytes - offset)), MPI_BYTE, left, 0,
              ctx.comm, &recv_requests_.back());
  }
  for (int64_t offset = 0; offset < send_bytes; offset += segment) {
    send_requests_.emplace_back();
    MPI_Isend(send + offset, static_cast<int>(std::min(segment, send_bytes - offset)), MPI_BYTE, right, 0,
              ctx.comm, &send_requests_.back());
  }
  if (reduce) {
    // Reduce segment k while segments k+1.. are still arriving.
    for (size_t k = 0; k < recv_requests_.size(); ++k) {
      MPI_Wait(&recv_requests_[k], MPI_STATUS_IGNORE);
      int64_t offset = static_cast<int64_t>(k) * segment;
      int64_t bytes = std::min(segment, recv_bytes - offset);
      ReduceTo(recv + offset, reduce_with + offset, scratch_.data() + offset, bytes / element, dtype, op);
    }
  } else {
    MPI_Waitall(static_cast<int>(recv_requests_.size()), recv_requests_.data(), MPI_STATUSES_IGNORE);
  }
  MPI_Waitall(static_cast<int>(send_requests_.size()), send_requests_.data(), MPI_STATUSES_IGNORE);
}

void RingAllreduce::Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) {
  RunFrom(ctx, buffer, buffer, count, dtype, op);
}

void RingAllreduce::RunFrom(const CommContext &ctx, const void *input, void *output, int64_t count, DataType dtype,
                            ReduceOp op) {
  const int n = ctx.size;
  auto *out = static_cast<uint8_t *>(output);
  const auto *in = static_cast<const uint8_t *>(input);
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  if (n == 1 || count == 0) {
    if (in != out) std::memcpy(out, in, static_cast<size_t>(count * element));
    return;
  }
  auto chunk_begin = [&](int c) { return count * c / n * element; };
  auto chunk_bytes = [&](int c) { return chunk_begin(c + 1) - chunk_begin(c); };

  // Reduce-scatter: after step s, the chunk received in it holds s+2 ranks' contributions; after n-1
  // steps this rank holds the full reduction of chunk (rank+1) mod n. Each chunk arrives here once, so
  // it is reduced with this rank's input; what step s>0 sends is what step s-1 wrote to output.
  for (int step = 0; step < n - 1; ++step) {
    int send_chunk = (ctx.rank - step + n) % n;
    int recv_chunk = (ctx.rank - step - 1 + n) % n;
    const uint8_t *send = (step == 0 ? in : out) + chunk_begin(send_chunk);
    Exchange(ctx, send, chunk_bytes(send_chunk), out + chunk_begin(recv_chunk), chunk_bytes(recv_chunk),
             in + chunk_begin(recv_chunk), dtype, op);
  }
  // All-gather: pass the finished chunks around the ring (this rank's own chunk of output is first
  // written here).
  for (int step = 0; step < n - 1; ++step) {
    int send_chunk = (ctx.rank + 1 - step + n) % n;
    int recv_chunk = (ctx.rank - step + n) % n;
    Exchange(ctx, out + chunk_begin(send_chunk), chunk_bytes(send_chunk), out + chunk_begin(recv_chunk),
             chunk_bytes(recv_chunk), nullptr, dtype, op);
  }
}

}  // namespace hvdlite
