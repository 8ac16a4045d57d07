#include "ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include "../reduce_kernels.h"

namespace hvdlite {

// Where byte ranges of the virtual buffer live: in one piece (a plain pointer) or across several (received
// through an hindexed datatype over absolute addresses from MPI_BOTTOM, sent from a packed copy).
class RingAllreduce::Layout {
 public:
  Layout(RingAllreduce &ring, const std::vector<BufferPiece> &pieces) : ring_(ring), pieces_(pieces) {
    std::vector<int64_t> &begin = ring_.piece_begin_;
    begin.resize(pieces.size() + 1);
    begin[0] = 0;
    for (size_t i = 0; i < pieces.size(); ++i) begin[i + 1] = begin[i] + pieces[i].bytes;
  }

  struct Span {
    void *address;
    int count;
    MPI_Datatype type;
  };

  // Where to receive [begin, begin + bytes) of the outputs.
  Span ReceiveSpan(int64_t begin, int64_t bytes) const {
    if (const uint8_t *whole = InOnePiece(begin, bytes, /*input=*/false)) {
      return Span{const_cast<uint8_t *>(whole), static_cast<int>(bytes), MPI_BYTE};
    }
    ring_.block_lengths_.clear();
    ring_.block_addresses_.clear();
    ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
      ring_.block_lengths_.push_back(static_cast<int>(take));
      ring_.block_addresses_.push_back(reinterpret_cast<MPI_Aint>(pieces_[i].output + skip));
    });
    MPI_Datatype type;
    MPI_Type_create_hindexed(static_cast<int>(ring_.block_lengths_.size()), ring_.block_lengths_.data(),
                             ring_.block_addresses_.data(), MPI_BYTE, &type);
    MPI_Type_commit(&type);
    ring_.datatypes_.push_back(type);
    return Span{MPI_BOTTOM, 1, type};
  }

  // A contiguous copy of [begin, begin + bytes) for sending: the span itself when one piece holds it, else
  // the pieces copied into staging. MPICH sends a derived datatype by packing it, measured 2.5x slower than
  // memcpy plus a contiguous send; receiving into one costs no more than a contiguous receive.
  const uint8_t *Contiguous(int64_t begin, int64_t bytes, bool input, uint8_t *staging) const {
    if (const uint8_t *whole = InOnePiece(begin, bytes, input)) return whole;
    uint8_t *to = staging;
    ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
      std::memcpy(to, Address(i, input) + skip, static_cast<size_t>(take));
      to += take;
    });
    return staging;
  }

  // output = input (op) received over [begin, begin + bytes), piece by piece.
  void Reduce(int64_t begin, int64_t bytes, const uint8_t *received, DataType dtype, ReduceOp op) const {
    const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
    ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
      ReduceTo(pieces_[i].output + skip, pieces_[i].input + skip, received, take / element, dtype, op);
      received += take;
    });
  }

 private:
  size_t PieceAt(int64_t byte) const {  // the piece holding byte (the last one for the end)
    const std::vector<int64_t> &begin = ring_.piece_begin_;
    size_t i = std::upper_bound(begin.begin(), begin.end(), byte) - begin.begin();
    return std::min(i == 0 ? 0 : i - 1, pieces_.size() - 1);
  }
  // f(piece, offset in the piece, bytes) for each piece's run of [begin, begin + bytes), in order.
  template <typename F>
  void ForEachRun(int64_t begin, int64_t bytes, F f) const {
    for (size_t i = PieceAt(begin); bytes > 0; ++i) {
      const int64_t skip = begin - ring_.piece_begin_[i];
      const int64_t take = std::min(bytes, pieces_[i].bytes - skip);
      if (take <= 0) continue;  // an empty piece
      f(i, skip, take);
      begin += take;
      bytes -= take;
    }
  }
  // The address of [begin, begin + bytes) when one piece holds all of it, else null.
  const uint8_t *InOnePiece(int64_t begin, int64_t bytes, bool input) const {
    const size_t i = PieceAt(begin);
    const int64_t offset = begin - ring_.piece_begin_[i];
    return offset + bytes <= pieces_[i].bytes ? Address(i, input) + offset : nullptr;
  }
  uint8_t *Address(size_t i, bool input) const {
    return input ? const_cast<uint8_t *>(pieces_[i].input) : pieces_[i].output;
  }

  RingAllreduce &ring_;
  const std::vector<BufferPiece> &pieces_;
};

void RingAllreduce::Exchange(const CommContext &ctx, const Layout &layout, int64_t send_begin, int64_t send_bytes,
                             bool send_from_input, int64_t recv_begin, int64_t recv_bytes, bool reduce,
                             DataType dtype, ReduceOp op) {
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
      Layout::Span span = layout.ReceiveSpan(recv_begin + offset, bytes);
      MPI_Irecv(span.address, span.count, span.type, left, 0, ctx.comm, &recv_requests_.back());
    }
  }
  if (static_cast<int64_t>(send_staging_.size()) < send_bytes) send_staging_.resize(send_bytes);
  for (int64_t offset = 0; offset < send_bytes; offset += segment) {
    const int64_t bytes = std::min(segment, send_bytes - offset);
    const uint8_t *from = layout.Contiguous(send_begin + offset, bytes, send_from_input, send_staging_.data() + offset);
    send_requests_.emplace_back();
    MPI_Isend(from, static_cast<int>(bytes), MPI_BYTE, right, 0, ctx.comm, &send_requests_.back());
  }
  if (reduce) {
    // Reduce segment k while segments k+1.. are still arriving.
    for (size_t k = 0; k < recv_requests_.size(); ++k) {
      MPI_Wait(&recv_requests_[k], MPI_STATUS_IGNORE);
      const int64_t offset = static_cast<int64_t>(k) * segment;
      layout.Reduce(recv_begin + offset, std::min(segment, recv_bytes - offset), scratch_.data() + offset, dtype, op);
    }
  } else {
    MPI_Waitall(static_cast<int>(recv_requests_.size()), recv_requests_.data(), MPI_STATUSES_IGNORE);
  }
  MPI_Waitall(static_cast<int>(send_requests_.size()), send_requests_.data(), MPI_STATUSES_IGNORE);
  for (MPI_Datatype &type : datatypes_) MPI_Type_free(&type);
  datatypes_.clear();
}

void RingAllreduce::Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) {
  RunFrom(ctx, buffer, buffer, count, dtype, op);
}

void RingAllreduce::RunFrom(const CommContext &ctx, const void *input, void *output, int64_t count, DataType dtype,
                            ReduceOp op) {
  single_.assign(1, BufferPiece{static_cast<const uint8_t *>(input), static_cast<uint8_t *>(output),
                                count * static_cast<int64_t>(DataTypeSize(dtype))});
  RunPieces(ctx, single_, count, dtype, op);
}

void RingAllreduce::RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                              DataType dtype, ReduceOp op) {
  const int n = ctx.size;
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  if (n == 1 || count == 0) {
    for (const BufferPiece &p : pieces) {
      if (p.input != p.output) std::memcpy(p.output, p.input, static_cast<size_t>(p.bytes));
    }
    return;
  }
  const Layout layout(*this, pieces);
  auto chunk_begin = [&](int c) { return count * c / n * element; };
  auto chunk_bytes = [&](int c) { return chunk_begin(c + 1) - chunk_begin(c); };

  // Reduce-scatter: after step s, the chunk received in it holds s+2 ranks' contributions; after n-1
  // steps this rank holds the full reduction of chunk (rank+1) mod n. Each chunk arrives here once, so
  // it is reduced with this rank's input; what step s>0 sends is what step s-1 wrote to output.
  for (int step = 0; step < n - 1; ++step) {
    int send_chunk = (ctx.rank - step + n) % n;
    int recv_chunk = (ctx.rank - step - 1 + n) % n;
    Exchange(ctx, layout, chunk_begin(send_chunk), chunk_bytes(send_chunk), /*send_from_input=*/step == 0,
             chunk_begin(recv_chunk), chunk_bytes(recv_chunk), /*reduce=*/true, dtype, op);
  }
  // All-gather: pass the finished chunks around the ring (this rank's own chunk of output is first
  // written here).
  for (int step = 0; step < n - 1; ++step) {
    int send_chunk = (ctx.rank + 1 - step + n) % n;
    int recv_chunk = (ctx.rank - step + n) % n;
    Exchange(ctx, layout, chunk_begin(send_chunk), chunk_bytes(send_chunk), /*send_from_input=*/false,
             chunk_begin(recv_chunk), chunk_bytes(recv_chunk), /*reduce=*/false, dtype, op);
  }
}

}  // namespace hvdlite
