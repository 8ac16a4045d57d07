// Direct all-reduce, for ranks on one host: each rank reads its share of the batch straight out of its
// peers' memory, reduces it into its own outputs, and hands the reduced share back to every peer. Each share is
// reduced on exactly one rank, so results are bitwise identical everywhere.
//
// A fused batch, and a tensor up to 4 MiB, is first packed into a staging buffer in shared memory (a memfd;
// only the shares peers reduce), which peers map once, read with plain loads, and overwrite in place with the
// reduced share: each rank then copies every other share out of its own staging buffer. Two small MPI
// collectives frame it: the addresses (allgather) and "shares reduced" (an allreduce that also carries any
// failure); after it no rank touches another's memory until the next batch's allgather. Reading scattered
// 4 KiB-paged tensors with process_vm_readv measured 2x slower than packing them (the kernel pins every page
// it reads). A larger single tensor is read where it is with process_vm_readv (inputs, then the reduced
// shares out of the owners' outputs, and a closing allreduce so nobody returns while a peer still reads):
// out of cache, the staging copies cost more than the kernel's pinning (docs/benchmarks.md).
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
                        DataType dtype, ReduceOp op) override {
    return RunPieces(ctx, pieces, count, dtype, op, nullptr);
  }
  // With between (if any) run on this rank's reduced share before it is handed to the peers.
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op, ShareStep *between);

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
  uint8_t *staged_ = nullptr;                  // this rank's staging buffer (staged batches only)
  std::vector<uint8_t *> peer_staging_;        // by rank: the peers' staging buffers, mapped
  std::vector<Published> published_;
  std::vector<uint8_t> scratch_;  // one chunk of a peer's share, reduced while it is in cache (one tensor)
};

}  // namespace hvdlite
