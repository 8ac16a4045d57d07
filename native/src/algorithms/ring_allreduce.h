// Ring all-reduce over MPI point-to-point: a reduce-scatter (n-1 steps, each rank reducing the chunk
// it receives from its left neighbour) then an all-gather (n-1 steps passing the reduced chunks on).
// Each chunk is sent in segments so that reducing segment k overlaps receiving segment k+1.
// Bandwidth-optimal: every rank sends 2(n-1)/n of the buffer. Each chunk is reduced on exactly one
// rank, so results are bitwise identical everywhere.
#pragma once
#include <vector>

#include "allreduce_algorithm.h"

namespace hvdlite {

class RingAllreduce : public AllreduceAlgorithm {
 public:
  explicit RingAllreduce(int64_t segment_bytes) : segment_bytes_(segment_bytes > 0 ? segment_bytes : 1 << 20) {}
  const char *name() const override { return "ring"; }
  void Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) override;
  // The first step sends straight from input, and every chunk this rank reduces is written as
  // input + received into output: no copy of the input beforehand.
  void RunFrom(const CommContext &ctx, const void *input, void *output, int64_t count, DataType dtype,
               ReduceOp op) override;
  void set_segment_bytes(int64_t bytes) { segment_bytes_ = bytes > 0 ? bytes : segment_bytes_; }

 private:
  // Sends [send, send+send_bytes) to the right and receives recv_bytes from the left. With reduce_with
  // set, received segments land in scratch and recv = reduce_with (op) received is written as they
  // arrive; otherwise they land directly in recv.
  void Exchange(const CommContext &ctx, const uint8_t *send, int64_t send_bytes, uint8_t *recv,
                int64_t recv_bytes, const uint8_t *reduce_with, DataType dtype, ReduceOp op);

  int64_t segment_bytes_;
  std::vector<uint8_t> scratch_;            // grows to the largest chunk seen, then reused
  std::vector<MPI_Request> recv_requests_;  // reused across calls: no allocation on the hot path
  std::vector<MPI_Request> send_requests_;
};

}  // namespace hvdlite
