#include "direct_allreduce.h"

#include <unistd.h>

#include <algorithm>

namespace hvdlite {
namespace {

// Peers' shares are read and reduced this much at a time, so that what was read is reduced from cache.
constexpr int64_t kChunkBytes = 256 << 10;

// A single tensor up to this size is staged too: packing it costs a copy, but plain loads from shared memory
// beat the kernel's page pinning while the copies stay in cache; above this size they no longer do, and three
// copies per byte lose to one (docs/decisions/direct-allreduce-within-a-host.md).
constexpr int64_t kStagedSingleMaxBytes = 4 << 20;

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
  staged_batch_ = pieces.size() > 1 || count * element <= kStagedSingleMaxBytes;
  const bool staged = staged_batch_;
  published_.resize(n);
  Published &mine = published_[ctx.rank];
  mine = Published{};
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
    mine.inputs = reinterpret_cast<uint64_t>(pieces[0].input);
    mine.results = reinterpret_cast<uint64_t>(pieces[0].output);
  }
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, published_.data(), sizeof(Published), MPI_BYTE, ctx.comm);
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
    copier_.Begin(static_cast<pid_t>(published_[owner].pid));
    copier_.Add(pieces[0].output + from, published_[owner].results + static_cast<uint64_t>(from),
                share_begin(owner + 1) - from);
    if (!copier_.Finish()) error = "reading rank " + std::to_string(owner) + "'s result: " + copier_.error();
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
        copier_.Begin(static_cast<pid_t>(published_[peer].pid));
        copier_.Add(scratch_.data(), published_[peer].inputs + static_cast<uint64_t>(chunk), bytes);
        if (!copier_.Finish()) return "reading rank " + std::to_string(peer) + "'s input: " + copier_.error();
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
    copier_.Begin(static_cast<pid_t>(published_[peer].pid), PeerCopier::Direction::kWrite);
    copier_.Add(layout_.Address(0, /*input=*/false) + from, published_[peer].results + static_cast<uint64_t>(from),
                bytes);
    if (!copier_.Finish()) return "writing rank " + std::to_string(peer) + "'s output: " + copier_.error();
  }
  return "";
}

std::string DirectAllreduce::MapPeers(const CommContext &ctx) {
  // A rank that could not make its buffer published none: every rank sees that and reports it.
  for (int r = 0; r < ctx.size; ++r) {
    if (published_[r].staging.bytes != 0) continue;
    if (r == ctx.rank) return staging_.error();
    return "rank " + std::to_string(r) + " has no shared staging buffer (see its error)";
  }
  peer_staging_.assign(ctx.size, nullptr);
  for (int k = 1; k < ctx.size; ++k) {
    const int peer = (ctx.rank + k) % ctx.size;
    peer_staging_[peer] = staging_.Map(peer, published_[peer].staging);
    if (!peer_staging_[peer]) return staging_.error();
  }
  return "";
}

}  // namespace hvdlite
