#include "algorithms/direct_allreduce.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace hvdlite {
namespace {

// Peers' shares are read and reduced this much at a time, so that what was read is reduced from cache.
constexpr int64_t kChunkBytes = 256 << 10;

// A batch whose tensors average up to this size is staged: packing costs a copy, but plain loads from shared
// memory beat the kernel's page pinning while the copies stay in cache (and a page pinned per small tensor costs
// more); above this size they no longer do, and three copies per byte lose to one
// (docs/decisions/direct-allreduce-within-a-host.md). A large tensor carrying a round's bits after it is then
// read in place, as it is alone.
constexpr int64_t kStagedMaxBytesPerTensor = 4 << 20;

// Every rank learns whether all succeeded; the failing rank reports its own error, the others name it.
std::string Agree(const CommContext &ctx, const std::string &local_error, const char *phase) {
  int first_failed = local_error.empty() ? ctx.size : ctx.rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, ctx.comm);
  if (first_failed == ctx.size) return "";
  if (!local_error.empty()) return "direct all-reduce, " + std::string(phase) + ": " + local_error;
  return "direct all-reduce, " + std::string(phase) + ": failed on rank " + std::to_string(first_failed) +
         " of the process set (see its error)";
}

}  // namespace

std::string DirectAllreduce::RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces,
                                       int64_t count, DataType dtype, ReduceOp op, ShareStep *between) {
  const int n = ctx.size;
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  if (CopyIfTrivial(ctx, pieces, count)) return "";
  auto share_begin = [&](int s) { return count * s / n * element; };
  const int64_t begin = share_begin(ctx.rank), end = share_begin(ctx.rank + 1);
  layout_.Reset(pieces);
  staged_batch_ = count * element <= kStagedMaxBytesPerTensor * static_cast<int64_t>(pieces.size());
  const bool staged = staged_batch_;
  published_words_ = kPublishedWords + (staged ? 0 : 2 * pieces.size());
  published_.assign(n * published_words_, 0);
  uint64_t *my_words = &published_[ctx.rank * published_words_];
  Published mine{};
  mine.pid = static_cast<uint64_t>(getpid());
  if (staged) {
    staged_ = staging_.Reserve(static_cast<size_t>(count * element));
    if (staged_) {
      // The shares peers reduce, each at its own offset; this rank's own share is read in place.
      layout_.Gather(0, begin, /*input=*/true, staged_);
      layout_.Gather(end, count * element - end, /*input=*/true, staged_ + end);
    }
    mine.staging = staging_.descriptor();  // bytes 0 when Reserve failed: MapPeers reports it everywhere
  } else {
    tensors_.Reset(pieces, /*merge=*/false);
    for (size_t i = 0; i < pieces.size(); ++i) {
      my_words[kPublishedWords + 2 * i] = reinterpret_cast<uint64_t>(pieces[i].input);
      my_words[kPublishedWords + 2 * i + 1] = reinterpret_cast<uint64_t>(pieces[i].output);
    }
  }
  std::memcpy(my_words, &mine, sizeof(mine));
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, published_.data(), static_cast<int>(published_words_),
                MPI_UINT64_T, ctx.comm);
  std::string error = staged ? MapPeers(ctx) : "";

  if (!between) {
    if (error.empty()) error = ReduceShare(ctx, begin, end, dtype, op, /*hand_back=*/staged);
  } else {
    // Peers on other hosts wait for this rank's step: it runs whatever happened here. It reduces the share
    // within the host and hands it back (through halves) where it suits it.
    HalvesOfShare halves(*this, ctx, begin, dtype, op);
    std::string step_error =
        between->RunOnShare(layout_, begin, end - begin, dtype, op, error.empty() ? &halves : nullptr);
    if (error.empty()) error = !halves.error().empty() ? halves.error() : step_error;
  }
  error = Agree(ctx, error, "reduce-scatter");
  if (!error.empty()) return error;

  if (staged) {
    // All-gather from this rank's own staging buffer, where each share's owner wrote it. No peer touches it
    // again before the next batch's addresses are exchanged, so no closing synchronisation.
    layout_.Scatter(0, begin, staged_);
    layout_.Scatter(end, count * element - end, staged_ + end);
    return "";
  }
  // Each share's owner wrote it into every peer's outputs already (HandBack), and all have agreed it is done.
  if (between) return "";
  // All-gather: every other share, read from the rank that reduced it into this rank's outputs.
  for (int k = 1; k < n && error.empty(); ++k) {
    const int owner = (ctx.rank + k) % n;
    const int64_t from = share_begin(owner);
    if (!CopyWithPeer(owner, from, share_begin(owner + 1) - from, /*peer_input=*/false,
                      PeerCopier::Direction::kRead, nullptr)) {
      error = "reading rank " + std::to_string(owner) + "'s result: " + copier_.error();
    }
  }
  // Nobody returns (and lets its caller touch the outputs) while a peer may still be reading them.
  return Agree(ctx, error, "all-gather");
}

std::string DirectAllreduce::ReduceShare(const CommContext &ctx, int64_t from, int64_t to, DataType dtype,
                                         ReduceOp op, bool hand_back) {
  // output = input (op) every peer's input, a chunk at a time. Peers meanwhile read other shares of this rank's
  // inputs, which nothing here writes.
  const int n = ctx.size;
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t chunk_bytes = std::max(element, kChunkBytes / element * element);
  if (!staged_batch_ && static_cast<int64_t>(scratch_.size()) < std::min(chunk_bytes, to - from)) {
    scratch_.resize(std::min(chunk_bytes, to - from));
  }
  for (int64_t chunk = from; chunk < to; chunk += chunk_bytes) {
    const int64_t bytes = std::min(chunk_bytes, to - chunk);
    for (int k = 1; k < n; ++k) {
      const int peer = (ctx.rank + k) % n;
      const uint8_t *received;
      if (staged_batch_) {
        received = peer_staging_[peer] + chunk;  // plain loads from shared memory
      } else {
        if (!CopyWithPeer(peer, chunk, bytes, /*peer_input=*/true, PeerCopier::Direction::kRead, scratch_.data())) {
          return "reading rank " + std::to_string(peer) + "'s input: " + copier_.error();
        }
        received = scratch_.data();
      }
      layout_.Reduce(chunk, bytes, received, /*from_output=*/k > 1, dtype, op);
    }
    // The result goes back while the lines just read are still in cache.
    if (hand_back) {
      std::string error = HandBack(ctx, chunk, bytes);
      if (!error.empty()) return error;
    }
  }
  return "";
}

std::string DirectAllreduce::HandBack(const CommContext &ctx, int64_t from, int64_t bytes) {
  for (int k = 1; k < ctx.size; ++k) {
    const int peer = (ctx.rank + k) % ctx.size;
    if (staged_batch_) {
      // Where the peer packed this share: it finds every share reduced in its own staging buffer.
      layout_.Gather(from, bytes, /*input=*/false, peer_staging_[peer] + from);
      continue;
    }
    if (!CopyWithPeer(peer, from, bytes, /*peer_input=*/false, PeerCopier::Direction::kWrite, nullptr)) {
      return "writing rank " + std::to_string(peer) + "'s output: " + copier_.error();
    }
  }
  return "";
}

bool DirectAllreduce::CopyWithPeer(int peer, int64_t from, int64_t bytes, bool peer_input,
                                   PeerCopier::Direction direction, uint8_t *local) {
  copier_.Begin(static_cast<pid_t>(PublishedBy(peer).pid), direction);
  int64_t copied = 0;
  tensors_.ForEachRun(from, bytes, [&](size_t i, int64_t skip, int64_t take) {
    uint8_t *here = local ? local + copied : tensors_.Address(i, /*input=*/false) + skip;
    copier_.Add(here, TensorOf(peer, i, peer_input) + static_cast<uint64_t>(skip), take);
    copied += take;
  });
  return copier_.Finish();
}

std::string DirectAllreduce::MapPeers(const CommContext &ctx) {
  // A rank that could not make its buffer published none: every rank sees that and reports it.
  for (int r = 0; r < ctx.size; ++r) {
    if (PublishedBy(r).staging.bytes != 0) continue;
    if (r == ctx.rank) return staging_.error();
    return "rank " + std::to_string(r) + " has no shared staging buffer (see its error)";
  }
  peer_staging_.assign(ctx.size, nullptr);
  for (int k = 1; k < ctx.size; ++k) {
    const int peer = (ctx.rank + k) % ctx.size;
    peer_staging_[peer] = staging_.Map(peer, PublishedBy(peer).staging);
    if (!peer_staging_[peer]) return staging_.error();
  }
  return "";
}

}  // namespace hvdlite
