// The ring all-reduce across hosts over the core's own TCP connections (transport/ring_sockets.h): the same
// chunks, steps and reduction order as RingAllreduce, so results are bitwise identical on every rank.
//
// It streams instead of stepping. The 2(n-1) steps' sends form one stream to the right neighbour and their
// receives one stream from the left, and a byte of a step's send leaves as soon as this rank has it: the chunk a
// step sends is the one the step before received (and, in the reduce-scatter, reduced), so it follows the
// reduction a few hundred KiB behind. No step waits for the previous one to drain, and the link stays busy
// across step boundaries. Waits block in poll(): the thread uses no CPU while the link is the limit.
//
// A fused batch is sent from and received into its tensors where they are (scatter/gather I/O); received
// reduce-scatter data goes through a bounded window and is reduced into the outputs as it arrives.
//
// Inside a hierarchical all-reduce it also runs the halves within the host (ShareHalves) while it waits for the
// network: the share is reduced within the host a grain at a time in the order the ring first reads its chunks,
// ahead of the ring or just in time, and final bytes are handed to the host's other ranks as they arrive. On a
// link-bound ring those halves then cost (nearly) nothing, where they used to come before and after it.
#pragma once
#include <sys/uio.h>

#include <vector>

#include "algorithms/allreduce_algorithm.h"

namespace hvdlite {

class RingSockets;

class TcpRingAllreduce : public PiecewiseAllreduce {
 public:
  TcpRingAllreduce(RingSockets &sockets, int64_t window_bytes);
  const char *name() const override { return "tcp ring"; }
  const char *timeline_phase() const override { return "TCP_RING_ALLREDUCE"; }
  // ctx: the ranks the sockets connect (its rank and size; its communicator is not used).
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op) override {
    return RunPieces(ctx, pieces, count, dtype, op, nullptr);
  }
  // With halves (if any) run in the ring's waits: the pieces are then a share not yet reduced within the host.
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op, ShareHalves *halves);

 private:
  // The I/O vector for bytes [begin, begin + bytes) of the inputs or outputs, at most kMaxVectors runs.
  int Vector(int64_t begin, int64_t bytes, bool input);

  RingSockets &sockets_;
  int64_t window_bytes_;
  BufferLayout layout_;
  std::vector<uint8_t> window_;  // received reduce-scatter bytes not yet reduced (fixed size, reused)
  std::vector<int64_t> done_;    // per step: bytes received (all-gather) or reduced (reduce-scatter)
  std::vector<iovec> vector_;
};

}  // namespace hvdlite
