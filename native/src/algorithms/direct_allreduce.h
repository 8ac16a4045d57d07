// Direct all-reduce, for ranks on one host: each rank reads its share of the batch straight out of its
// peers' memory, reduces it into its own outputs, and hands the reduced share back to every peer. Each share is
// reduced on exactly one rank, so results are bitwise identical everywhere.
//
// A batch whose tensors average up to 4 MiB (a fused batch of gradients, a tensor up to 4 MiB) is first packed
// into a staging buffer in shared memory (a memfd; only the shares peers reduce), which peers map once, read
// with plain loads, and overwrite in place with the reduced share: each rank then copies every other share out
// of its own staging buffer. Two small MPI collectives frame it: the addresses (allgather) and "shares reduced"
// (an allreduce that also carries any failure); after it no rank touches another's memory until the next
// batch's allgather. Reading scattered 4 KiB-paged tensors with process_vm_readv measured 2x slower than packing
// them (the kernel pins every page it reads). Larger tensors (one, or one with the few bytes of a carried round
// after it) are read where they are with process_vm_readv (inputs, then the reduced shares out of the owners'
// outputs, and a closing allreduce so nobody returns while a peer still reads): out of cache, the staging copies
// cost more than the kernel's pinning (docs/benchmarks.md).
#pragma once
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/allreduce_algorithm.h"
#include "algorithms/cross_memory.h"
#include "algorithms/shared_staging.h"

namespace hvdlite {

class DirectAllreduce : public PiecewiseAllreduce {
 public:
  const char *name() const override { return "direct"; }
  const char *timeline_phase() const override { return "DIRECT_ALLREDUCE"; }
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op) override {
    return RunPieces(ctx, pieces, count, dtype, op, nullptr);
  }
  // With between (if any) run on this rank's share: it reduces the share within the host and hands it to the
  // peers through the halves it is given, before, after or while it works on it (ShareStep); a larger single
  // tensor is then written into the peers' outputs by its share's owner, not read from the owner's.
  std::string RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                        DataType dtype, ReduceOp op, ShareStep *between);

 private:
  // What each rank publishes, followed (a batch read in place) by where each of its tensors is: input, output.
  // A staged batch: its staging buffer, which holds the batch's bytes laid end to end (bytes 0 when it has none).
  struct Published {
    uint64_t pid;
    SharedStaging::Descriptor staging;
  };
  static constexpr size_t kPublishedWords = sizeof(Published) / sizeof(uint64_t);
  // The halves within the host of this rank's share (at share_begin), for a step that runs them itself.
  class HalvesOfShare : public ShareHalves {
   public:
    HalvesOfShare(DirectAllreduce &direct, const CommContext &ctx, int64_t share_begin, DataType dtype, ReduceOp op)
        : direct_(direct), ctx_(ctx), share_begin_(share_begin), dtype_(dtype), op_(op) {}
    bool Prepare(int64_t begin, int64_t bytes) override {
      if (error_.empty()) {
        error_ = direct_.ReduceShare(ctx_, share_begin_ + begin, share_begin_ + begin + bytes, dtype_, op_,
                                     /*hand_back=*/false);
      }
      return error_.empty();
    }
    bool Deliver(int64_t begin, int64_t bytes) override {
      if (error_.empty()) error_ = direct_.HandBack(ctx_, share_begin_ + begin, bytes);
      return error_.empty();
    }
    const std::string &error() const override { return error_; }

   private:
    DirectAllreduce &direct_;
    const CommContext &ctx_;
    const int64_t share_begin_;
    const DataType dtype_;
    const ReduceOp op_;
    std::string error_;
  };

  Published PublishedBy(int rank) const {
    Published theirs;
    std::memcpy(&theirs, &published_[rank * published_words_], sizeof(theirs));
    return theirs;
  }
  // Where tensor i of rank's batch is (a batch read in place): its input or its output.
  uint64_t TensorOf(int rank, size_t i, bool input) const {
    return published_[rank * published_words_ + kPublishedWords + 2 * i + (input ? 0 : 1)];
  }
  // Copies bytes [from, from + bytes) of the batch between peer's tensors (its inputs or outputs) and local:
  // contiguous bytes here, or this rank's outputs (local null).
  bool CopyWithPeer(int peer, int64_t from, int64_t bytes, bool peer_input, PeerCopier::Direction direction,
                    uint8_t *local);
  // Maps every peer's staging buffer into peer_staging_; an error when some rank has none or one fails.
  std::string MapPeers(const CommContext &ctx);
  // Bytes [from, to) of the batch (within this rank's share) reduced within the host into this rank's outputs,
  // a chunk at a time; hand_back: each chunk also handed back to the peers as soon as it is reduced.
  std::string ReduceShare(const CommContext &ctx, int64_t from, int64_t to, DataType dtype, ReduceOp op,
                          bool hand_back);
  // Bytes [from, from + bytes) of the batch, final on this rank (its share), into every peer: where the peer
  // packed them in its staging buffer (a staged batch), else into its outputs (process_vm_writev).
  std::string HandBack(const CommContext &ctx, int64_t from, int64_t bytes);

  BufferLayout layout_;
  PeerCopier copier_;
  SharedStaging staging_;
  bool staged_batch_ = false;                  // whether this batch goes through the staging buffers
  uint8_t *staged_ = nullptr;                  // this rank's staging buffer (staged batches only)
  std::vector<uint8_t *> peer_staging_;        // by rank: the peers' staging buffers, mapped
  // A batch read in place, tensor by tensor (not merged into runs): every rank's batch has the same tensors in
  // the same order, so the same run and offset name the same bytes in a peer's tensors.
  BufferLayout tensors_;
  size_t published_words_ = kPublishedWords;   // per rank in published_
  std::vector<uint64_t> published_;            // by rank: Published, then its tensors' addresses (read in place)
  std::vector<uint8_t> scratch_;  // one chunk of a peer's share, reduced while it is in cache (one tensor)
};

}  // namespace hvdlite
