// Hierarchical all-reduce, for ranks on several hosts: a reduce-scatter among the ranks of each host (direct,
// through shared memory, where they can read each other's memory; else the ring), then an all-reduce of each
// rank's reduced share across hosts among the ranks with the same local rank (the ring, or MPI_Allreduce for
// small shares), then an all-gather within each host. Each host's link then carries the batch's 2(h-1)/h once
// per host instead of once per rank, and only between hosts: a flat ring over ranks in blocks crosses each
// link with 1.5x that on 2 hosts x 2 ranks, and over ranks placed round-robin every hop crosses a link.
// Which ranks share a host, not their order, decides the groups, so placement does not matter.
//
// Each share is reduced on one rank per host, then by the cross-host ring (each chunk on one rank), and copied
// from there: results are bitwise identical on every rank. Where the ranks of a host read each other's memory
// (direct) and the ring across hosts runs on its own connections, the halves within the host run inside the
// ring's waits for the network (TcpRingAllreduce), not before and after it. Needs the same number of ranks on
// every host (Core checks it and otherwise keeps the flat algorithms); runs on the global process set only.
#pragma once
#include <string>
#include <vector>

#include "algorithms/allreduce_algorithm.h"
#include "algorithms/direct_allreduce.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/tcp_ring_allreduce.h"

namespace hvdlite {

class HierarchicalAllreduce : public PiecewiseAllreduce, private ShareStep {
 public:
  // local_direct and local_ring: the executor's, reused within each host; the cross-host ring is its own (it
  // runs inside the local algorithm's call).
  HierarchicalAllreduce(DirectAllreduce &local_direct, RingAllreduce &local_ring, int64_t ring_segment_bytes)
      : local_direct_(local_direct), local_ring_(local_ring), cross_ring_(ring_segment_bytes) {}
  const char *name() const override { return "hierarchical"; }
  const char *timeline_phase() const override { return "HIERARCHICAL_ALLREDUCE"; }
  // local: this host's ranks; cross: the ranks with this rank's local rank, one per host. Shares of at least
  // cross_ring_min_bytes cross hosts by the ring (over tcp_ring's connections where given, else MPI's), smaller
  // ones by MPI_Allreduce.
  void SetTopology(const CommContext &local, const CommContext &cross, bool direct_within_host,
                   int64_t cross_ring_min_bytes, TcpRingAllreduce *tcp_ring);
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op) override;

 private:
  std::string CrossRing(const std::vector<BufferPiece> &pieces, int64_t count, DataType dtype, ReduceOp op) {
    return tcp_ring_ ? tcp_ring_->RunPieces(cross_, pieces, count, dtype, op)
                     : cross_ring_.RunPieces(cross_, pieces, count, dtype, op);
  }
  std::string RunOnShare(const BufferLayout &layout, int64_t begin, int64_t bytes, DataType dtype, ReduceOp op,
                         ShareHalves *halves) override;
  // The share's step across hosts (reduced within the host already).
  std::string AcrossHosts(const BufferLayout &layout, int64_t begin, int64_t bytes, DataType dtype, ReduceOp op);
  // The share's runs in the layout's outputs, in place (share_).
  const std::vector<BufferPiece> &SharePieces(const BufferLayout &layout, int64_t begin, int64_t bytes);

  DirectAllreduce &local_direct_;
  RingAllreduce &local_ring_;
  RingAllreduce cross_ring_;
  TcpRingAllreduce *tcp_ring_ = nullptr;  // the ring across hosts on its own connections, when they are up
  CommContext local_{MPI_COMM_NULL, 0, 1}, cross_{MPI_COMM_NULL, 0, 1};
  bool direct_within_host_ = false;
  int64_t cross_ring_min_bytes_ = 0;
  std::vector<BufferPiece> share_;  // the share's runs, in place (reused)
  std::vector<uint8_t> packed_;     // a small share, packed for MPI_Allreduce (reused)
};

}  // namespace hvdlite
