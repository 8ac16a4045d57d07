// Ring all-reduce over MPI point-to-point: a reduce-scatter (n-1 steps, each rank reducing the chunk
// it receives from its left neighbour) then an all-gather (n-1 steps passing the reduced chunks on).
// Each chunk is sent in segments so that reducing segment k overlaps receiving segment k+1.
// Bandwidth-optimal: every rank sends 2(n-1)/n of the buffer. Each chunk is reduced on exactly one
// rank, so results are bitwise identical everywhere.
//
// A fused batch is reduced where its tensors are: a segment that spans several tensors is received
// straight into them through an MPI derived datatype, and sent from a packed copy (MPICH sends derived
// datatypes 2.5x slower than memcpy plus a contiguous send, docs/benchmarks.md).
#pragma once
#include <vector>

#include "algorithms/allreduce_algorithm.h"

namespace hvdlite {

class RingAllreduce : public PiecewiseAllreduce {
 public:
  explicit RingAllreduce(int64_t segment_bytes) : segment_bytes_(segment_bytes > 0 ? segment_bytes : 1 << 20) {}
  const char *name() const override { return "ring"; }
  const char *timeline_phase() const override { return "RING_ALLREDUCE"; }
  // The first step sends straight from the inputs, and every chunk this rank reduces is written as
  // input + received into the outputs: no copy of the inputs beforehand.
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op) override {
    return RunPieces(ctx, pieces, count, dtype, op, nullptr);
  }
  // With between (if any) run on the chunk this rank holds reduced, before the all-gather passes it on.
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op, ShareStep *between);
  void set_segment_bytes(int64_t bytes) { segment_bytes_ = bytes > 0 ? bytes : segment_bytes_; }

 private:
  struct Span {
    void *address;
    int count;
    MPI_Datatype type;
  };
  // Sends bytes [send_begin, +send_bytes) of the inputs (or outputs) to the right and receives bytes
  // [recv_begin, +recv_bytes) from the left. With reduce, received segments land in scratch and
  // output = input (op) received is written as they arrive; otherwise they land in the outputs.
  void Exchange(const CommContext &ctx, int64_t send_begin, int64_t send_bytes, bool send_from_input,
                int64_t recv_begin, int64_t recv_bytes, bool reduce, DataType dtype, ReduceOp op);
  // Where to receive [begin, begin + bytes) of the outputs: a plain pointer, or an hindexed datatype over
  // absolute addresses when the range spans pieces (freed after the step).
  Span ReceiveSpan(int64_t begin, int64_t bytes);
  // A contiguous copy of [begin, begin + bytes) for sending: the range itself when one piece holds it,
  // else the pieces copied into staging.
  const uint8_t *Contiguous(int64_t begin, int64_t bytes, bool input, uint8_t *staging) const;

  int64_t segment_bytes_;
  BufferLayout layout_;
  std::vector<uint8_t> scratch_;            // grows to the largest chunk seen, then reused
  std::vector<uint8_t> send_staging_;       // sent segments that span tensors, packed (likewise reused)
  std::vector<MPI_Request> recv_requests_;  // reused across calls: no allocation on the hot path
  std::vector<MPI_Request> send_requests_;
  std::vector<MPI_Datatype> datatypes_;     // made for segments spanning tensors, freed after each step
  std::vector<int> block_lengths_;
  std::vector<MPI_Aint> block_addresses_;
};

}  // namespace hvdlite
