// Direct all-reduce, for ranks on one host: each rank reads its share of the batch straight out of its
// peers' memory (cross-memory attach), reduces it into its own outputs, then reads the other shares of the
// result straight out of the ranks that reduced them. Each share is reduced on exactly one rank, so
// results are bitwise identical everywhere. Three small MPI collectives frame it: the addresses
// (allgather), "shares reduced" and "results read" (allreduces that also carry any failure).
//
// A batch of one tensor is read where it is, with process_vm_readv. A fused batch is first packed into a
// staging buffer in shared memory (only the shares peers read), and each rank's reduced share is copied
// there too; peers map that buffer once and read it with plain loads. Reading scattered 4 KiB-paged tensors
// with process_vm_readv measured 2x slower than packing them (the kernel pins every page it reads), and a
// packed buffer read through the kernel still costs a copy that shared memory does not (docs/benchmarks.md).
#pragma once
#include <string>
#include <vector>

#include "allreduce_algorithm.h"
#include "cross_memory.h"
#include "shared_staging.h"

namespace hvdlite {

class DirectAllreduce : public PiecewiseAllreduce {
 public:
  const char *name() const override { return "direct"; }
  const char *timeline_phase() const override { return "DIRECT_ALLREDUCE"; }
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op) override;

 private:
  // What each rank publishes. One tensor: where peers read its input and its reduced share. A fused batch:
  // its staging buffer, which holds the batch's bytes laid end to end (bytes 0 when it has none).
  struct Published {
    uint64_t pid;
    uint64_t inputs;
    uint64_t results;
    SharedStaging::Descriptor staging;
  };
  // Maps every peer's staging buffer into peer_staging_; an error when some rank has none or one fails.
  std::string MapPeers(const CommContext &ctx);

  BufferLayout layout_;
  PeerReader reader_;
  SharedStaging staging_;
  uint8_t *staged_ = nullptr;                  // this rank's staging buffer (fused batches only)
  std::vector<uint8_t *> peer_staging_;        // by rank: the peers' staging buffers, mapped
  std::vector<Published> published_;
  std::vector<uint8_t> scratch_;  // one chunk of a peer's share, reduced while it is in cache (one tensor)
};

}  // namespace hvdlite
