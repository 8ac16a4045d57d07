// Direct all-reduce, for ranks on one host: each rank reads its share of the batch straight out of its
// peers' memory (cross-memory attach), reduces it into its own outputs, then reads the other shares of the
// result straight out of the ranks that reduced them. Each share is reduced on exactly one rank, so
// results are bitwise identical everywhere. Three small MPI collectives frame it: the addresses
// (allgather), "shares reduced" and "results read" (allreduces that also carry any failure).
//
// A batch of one tensor is read where it is. A fused batch is first packed into a staging buffer backed by
// huge pages (only the shares peers read), and each rank's reduced share is copied there too: the kernel
// pins every page it reads from a peer, and reading scattered 4 KiB-paged tensors directly measured 2x
// slower than packing them first (docs/benchmarks.md).
#pragma once
#include <string>
#include <vector>

#include "allreduce_algorithm.h"
#include "cross_memory.h"
#include "staging_buffer.h"

namespace hvdlite {

class DirectAllreduce : public PiecewiseAllreduce {
 public:
  const char *name() const override { return "direct"; }
  const char *timeline_phase() const override { return "DIRECT_ALLREDUCE"; }
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op) override;

 private:
  // What each rank publishes: where peers read its inputs and its reduced share, as the virtual buffer
  // (the batch's bytes laid end to end) starting at these addresses.
  struct Published {
    uint64_t pid;
    uint64_t inputs;
    uint64_t results;
  };
  BufferLayout layout_;
  PeerReader reader_;
  StagingBuffer staging_;
  uint8_t *staged_ = nullptr;  // the batch's bytes at their offsets (fused batches only)
  std::vector<Published> published_;
  std::vector<uint8_t> scratch_;  // one chunk of a peer's share, reduced while it is in cache
};

}  // namespace hvdlite
