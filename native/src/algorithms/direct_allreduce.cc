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
  const bool staged = pieces.size() > 1 || count * element <= kStagedSingleMaxBytes;
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

  // Reduce-scatter: output = input (op) every peer's input over this rank's share, a chunk at a time.
  // Peers meanwhile read other shares of this rank's inputs, which nothing here writes.
  const int64_t chunk_bytes = std::max(element, kChunkBytes / element * element);
  if (!staged && static_cast<int64_t>(scratch_.size()) < std::min(chunk_bytes, end - begin)) {
    scratch_.resize(std::min(chunk_bytes, end - begin));
  }
  for (int64_t chunk = begin; chunk < end && error.empty(); chunk += chunk_bytes) {
    const int64_t bytes = std::min(chunk_bytes, end - chunk);
    for (int k = 1; k < n; ++k) {
      const int peer = (ctx.rank + k) % n;
      const uint8_t *received;
      if (staged) {
        received = peer_staging_[peer] + chunk;  // plain loads from shared memory
      } else {
        reader_.Begin(static_cast<pid_t>(published_[peer].pid));
        reader_.Add(scratch_.data(), published_[peer].inputs + static_cast<uint64_t>(chunk), bytes);
        if (!reader_.Finish()) {
          error = "reading rank " + std::to_string(peer) + "'s input: " + reader_.error();
          break;
        }
        received = scratch_.data();
      }
      layout_.Reduce(chunk, bytes, received, /*from_output=*/k > 1, dtype, op);
    }
    if (!staged || between) continue;
    // The result goes back where each peer packed this share (the lines just read, still in cache): each
    // rank then finds every other share reduced in its own staging buffer.
    for (int k = 1; k < n; ++k) {
      layout_.Gather(chunk, bytes, /*input=*/false, peer_staging_[(ctx.rank + k) % n] + chunk);
    }
  }
  if (between) {
    // Peers on other hosts wait for this rank's step: it runs whatever happened here.
    std::string step_error = between->RunOnShare(layout_, begin, end - begin, dtype, op);
    if (error.empty()) error = step_error;
    for (int k = 1; k < n && staged && error.empty(); ++k) {
      layout_.Gather(begin, end - begin, /*input=*/false, peer_staging_[(ctx.rank + k) % n] + begin);
    }
  }
  error = Agree(ctx, error, "reduce-scatter");
  if (!error.empty()) return error;

  if (staged) {
    // All-gather from this rank's own staging buffer. No peer touches it again before the next batch's
    // addresses are exchanged, so no closing synchronisation.
    layout_.Scatter(0, begin, staged_);
    layout_.Scatter(end, count * element - end, staged_ + end);
    return "";
  }
  // All-gather: every other share, read from the rank that reduced it into this rank's outputs.
  for (int k = 1; k < n && error.empty(); ++k) {
    const int owner = (ctx.rank + k) % n;
    const int64_t from = share_begin(owner);
    reader_.Begin(static_cast<pid_t>(published_[owner].pid));
    reader_.Add(pieces[0].output + from, published_[owner].results + static_cast<uint64_t>(from),
                share_begin(owner + 1) - from);
    if (!reader_.Finish()) error = "reading rank " + std::to_string(owner) + "'s result: " + reader_.error();
  }
  // Nobody returns (and lets its caller touch the outputs) while a peer may still be reading them.
  return Agree(ctx, error, "all-gather");
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
