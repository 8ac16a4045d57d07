#include "algorithms/ring_allreduce.h"

#include <algorithm>

#include "base/progress_watchdog.h"

namespace hvdlite {

RingAllreduce::Span RingAllreduce::ReceiveSpan(int64_t begin, int64_t bytes) {
  if (uint8_t *whole = layout_.InOnePiece(begin, bytes, /*input=*/false)) {
    return Span{whole, static_cast<int>(bytes), MPI_BYTE};
  }
  block_lengths_.clear();
  block_addresses_.clear();
  layout_.ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
    block_lengths_.push_back(static_cast<int>(take));
    block_addresses_.push_back(reinterpret_cast<MPI_Aint>(layout_.Address(i, /*input=*/false) + skip));
  });
  MPI_Datatype type;
  MPI_Type_create_hindexed(static_cast<int>(block_lengths_.size()), block_lengths_.data(), block_addresses_.data(),
                           MPI_BYTE, &type);
  MPI_Type_commit(&type);
  datatypes_.push_back(type);
  return Span{MPI_BOTTOM, 1, type};
}

const uint8_t *RingAllreduce::Contiguous(int64_t begin, int64_t bytes, bool input, uint8_t *staging) const {
  if (const uint8_t *whole = layout_.InOnePiece(begin, bytes, input)) return whole;
  layout_.Gather(begin, bytes, input, staging);
  return staging;
}

void RingAllreduce::Exchange(const CommContext &ctx, int64_t send_begin, int64_t send_bytes, bool send_from_input,
                             int64_t recv_begin, int64_t recv_bytes, bool reduce, DataType dtype, ReduceOp op) {
  const int right = (ctx.rank + 1) % ctx.size;
  const int left = (ctx.rank - 1 + ctx.size) % ctx.size;
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t segment = std::max(element, segment_bytes_ / element * element);
  if (reduce && static_cast<int64_t>(scratch_.size()) < recv_bytes) scratch_.resize(recv_bytes);

  // Post every receive first (each segment has its own landing spot), then every send: the left
  // neighbour's sends can complete as soon as they start, whatever we are busy reducing.
  recv_requests_.clear();
  send_requests_.clear();
  for (int64_t offset = 0; offset < recv_bytes; offset += segment) {
    const int64_t bytes = std::min(segment, recv_bytes - offset);
    recv_requests_.emplace_back();
    if (reduce) {
      MPI_Irecv(scratch_.data() + offset, static_cast<int>(bytes), MPI_BYTE, left, 0, ctx.comm,
                &recv_requests_.back());
    } else {
      Span span = ReceiveSpan(recv_begin + offset, bytes);
      MPI_Irecv(span.address, span.count, span.type, left, 0, ctx.comm, &recv_requests_.back());
    }
  }
  if (static_cast<int64_t>(send_staging_.size()) < send_bytes) send_staging_.resize(send_bytes);
  for (int64_t offset = 0; offset < send_bytes; offset += segment) {
    const int64_t bytes = std::min(segment, send_bytes - offset);
    const uint8_t *from = Contiguous(send_begin + offset, bytes, send_from_input, send_staging_.data() + offset);
    send_requests_.emplace_back();
    MPI_Isend(from, static_cast<int>(bytes), MPI_BYTE, right, 0, ctx.comm, &send_requests_.back());
  }
  if (reduce) {
    // Reduce segment k while segments k+1.. are still arriving.
    for (size_t k = 0; k < recv_requests_.size(); ++k) {
      MPI_Wait(&recv_requests_[k], MPI_STATUS_IGNORE);
      NoteProgress();
      const int64_t offset = static_cast<int64_t>(k) * segment;
      layout_.Reduce(recv_begin + offset, std::min(segment, recv_bytes - offset), scratch_.data() + offset,
                      /*from_output=*/false, dtype, op);
    }
  } else {
    for (MPI_Request &request : recv_requests_) {
      MPI_Wait(&request, MPI_STATUS_IGNORE);
      NoteProgress();
    }
  }
  MPI_Waitall(static_cast<int>(send_requests_.size()), send_requests_.data(), MPI_STATUSES_IGNORE);
  for (MPI_Datatype &type : datatypes_) MPI_Type_free(&type);
  datatypes_.clear();
}

std::string RingAllreduce::RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                                     DataType dtype, ReduceOp op, ShareStep *between) {
  const int n = ctx.size;
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  if (CopyIfTrivial(ctx, pieces, count)) return "";
  layout_.Reset(pieces);
  auto chunk_begin = [&](int c) { return count * c / n * element; };
  auto chunk_bytes = [&](int c) { return chunk_begin(c + 1) - chunk_begin(c); };

  // Reduce-scatter: after step s, the chunk received in it holds s+2 ranks' contributions; after n-1
  // steps this rank holds the full reduction of chunk (rank+1) mod n. Each chunk arrives here once, so
  // it is reduced with this rank's input; what step s>0 sends is what step s-1 wrote to output.
  for (int step = 0; step < n - 1; ++step) {
    int send_chunk = (ctx.rank - step + n) % n;
    int recv_chunk = (ctx.rank - step - 1 + n) % n;
    Exchange(ctx, chunk_begin(send_chunk), chunk_bytes(send_chunk), /*send_from_input=*/step == 0,
             chunk_begin(recv_chunk), chunk_bytes(recv_chunk), /*reduce=*/true, dtype, op);
  }
  std::string error;  // the step's; the all-gather still runs, for the peers waiting in it
  if (between) error = between->RunOnShare(layout_, chunk_begin((ctx.rank + 1) % n), chunk_bytes((ctx.rank + 1) % n),
                                           dtype, op, /*halves=*/nullptr);
  // All-gather: pass the finished chunks around the ring (this rank's own chunk of output is first
  // written here).
  for (int step = 0; step < n - 1; ++step) {
    int send_chunk = (ctx.rank + 1 - step + n) % n;
    int recv_chunk = (ctx.rank - step + n) % n;
    Exchange(ctx, chunk_begin(send_chunk), chunk_bytes(send_chunk), /*send_from_input=*/false,
             chunk_begin(recv_chunk), chunk_bytes(recv_chunk), /*reduce=*/false, dtype, op);
  }
  return error;
}

}  // namespace hvdlite
