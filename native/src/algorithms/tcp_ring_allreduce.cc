#include "algorithms/tcp_ring_allreduce.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/progress_watchdog.h"
#include "transport/ring_sockets.h"

namespace hvdlite {
namespace {

constexpr int kMaxVectors = 64;               // runs per system call
constexpr int64_t kMaxBytesPerCall = 8 << 20;  // bytes per system call
constexpr int64_t kReduceGrain = 256 << 10;    // reduce received bytes in pieces of at least this much
constexpr int64_t kHalvesGrain = 256 << 10;    // the halves within the host run this much between two polls

// The ring's chunks (RingAllreduce's), and which chunk each step sends and receives. Steps 0..n-2 reduce-scatter,
// n-1.. all-gather; what step t sends is what step t-1 received.
struct RingChunks {
  int n, rank;
  int64_t count, element;
  int64_t Begin(int c) const { return count * c / n * element; }
  int64_t Bytes(int c) const { return Begin(c + 1) - Begin(c); }
  int Sent(int t) const { return t < n - 1 ? (rank - t + n) % n : (rank + 1 - (t - (n - 1)) + n) % n; }
  int Received(int t) const { return t < n - 1 ? (rank - t - 1 + n) % n : (rank - (t - (n - 1)) + n) % n; }
};

// The halves within the host (ShareHalves), paced by the ring. Chunks are prepared in the order the ring first
// reads them: its own chunk (sent by step 0), then the chunk each reduce-scatter step receives (reduced into
// it). The chunks that end final are the last reduce-scatter step's and every all-gather step's; their bytes are
// delivered as those steps finish them. Without halves everything counts as prepared and nothing is delivered.
class PacedHalves {
 public:
  PacedHalves(ShareHalves *halves, const RingChunks &chunks) : halves_(halves), chunks_(chunks), n_(chunks.n) {}

  // Bytes of chunk c prepared so far.
  int64_t Prepared(int c) const {
    if (!halves_) return chunks_.Bytes(c);
    const int k = (chunks_.rank - c + n_) % n_;  // its place in the order of preparation
    return k < next_ ? chunks_.Bytes(c) : k == next_ ? at_ : 0;
  }
  // Prepares chunk c up to bytes, and every chunk before it in the order.
  void PrepareUpTo(int c, int64_t bytes) {
    while (Prepared(c) < bytes) PrepareGrain();
  }
  // Whether a grain of either half can run now; done: bytes each step has finished (TcpRingAllreduce::done_).
  bool HasWork(const std::vector<int64_t> &done) {
    return halves_ && (next_ < n_ || Deliverable(done) > 0);
  }
  // Runs one grain: preparation first (the ring waits for it), else delivery.
  void RunGrain(const std::vector<int64_t> &done) {
    if (next_ < n_) {
      PrepareGrain();
    } else {
      DeliverUpTo(done, kHalvesGrain);
    }
  }
  // After the ring: delivers what is left.
  void Finish(const std::vector<int64_t> &done) {
    while (halves_ && next_ < n_) PrepareGrain();
    while (halves_ && Deliverable(done) > 0) DeliverUpTo(done, INT64_MAX);
  }

 private:
  int64_t Begin(int c) const { return chunks_.Begin(c); }
  int64_t Bytes(int c) const { return chunks_.Bytes(c); }
  int PrepareChunk() const { return next_ == 0 ? chunks_.Sent(0) : chunks_.Received(next_ - 1); }
  int FinalStep() const { return n_ - 2 + final_; }
  int FinalChunk() const { return chunks_.Received(FinalStep()); }

  void PrepareGrain() {
    while (next_ < n_ && at_ == Bytes(PrepareChunk())) {
      ++next_;
      at_ = 0;
    }
    if (next_ == n_) return;
    const int64_t take = std::min(kHalvesGrain, Bytes(PrepareChunk()) - at_);
    if (!halves_->Prepare(Begin(PrepareChunk()) + at_, take)) return Stop();
    at_ += take;
  }
  // Bytes of the current final chunk done and not yet delivered (skipping chunks delivered whole).
  int64_t Deliverable(const std::vector<int64_t> &done) {
    while (final_ < n_ && delivered_ == Bytes(FinalChunk())) {
      ++final_;
      delivered_ = 0;
    }
    return final_ < n_ ? done[FinalStep()] - delivered_ : 0;
  }
  void DeliverUpTo(const std::vector<int64_t> &done, int64_t most) {
    const int64_t take = std::min(most, Deliverable(done));
    if (take <= 0) return;
    if (!halves_->Deliver(Begin(FinalChunk()) + delivered_, take)) return Stop();
    delivered_ += take;
  }
  // After a failure (the halves keep its error): the ring goes on as if everything were prepared.
  void Stop() { halves_ = nullptr; }

  ShareHalves *halves_;
  const RingChunks &chunks_;
  const int n_;
  int next_ = 0;            // the chunk being prepared, as its place in the order
  int64_t at_ = 0;          // bytes of it prepared
  int final_ = 0;           // the final chunk being delivered, as its place among them
  int64_t delivered_ = 0;   // bytes of it delivered
};

}  // namespace

TcpRingAllreduce::TcpRingAllreduce(RingSockets &sockets, int64_t window_bytes)
    : sockets_(sockets), window_bytes_(std::max<int64_t>(window_bytes, 2 * kReduceGrain)) {
  vector_.reserve(kMaxVectors);
}

int TcpRingAllreduce::Vector(int64_t begin, int64_t bytes, bool input) {
  vector_.clear();
  layout_.ForEachRun(begin, std::min(bytes, kMaxBytesPerCall), [&](size_t i, int64_t skip, int64_t take) {
    vector_.push_back(iovec{layout_.Address(i, input) + skip, static_cast<size_t>(take)});
    return vector_.size() < kMaxVectors;  // the rest goes in the next call
  });
  return static_cast<int>(vector_.size());
}

std::string TcpRingAllreduce::RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                                        DataType dtype, ReduceOp op, ShareHalves *halves) {
  if (CopyIfTrivial(ctx, pieces, count)) {
    const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
    if (halves && halves->Prepare(0, bytes)) (void)halves->Deliver(0, bytes);
    return "";
  }
  if (!sockets_.connected()) return sockets_.ClosedError();
  layout_.Reset(pieces);
  const int n = ctx.size, rank = ctx.rank, steps = 2 * (n - 1);
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  // What step t sends is what step t-1 received: its bytes leave as soon as done_[t-1] says they are there.
  const RingChunks chunks{n, rank, count, element};
  if (static_cast<int64_t>(window_.size()) < window_bytes_) window_.resize(window_bytes_);
  done_.assign(steps, 0);
  PacedHalves paced(halves, chunks);

  int send_step = 0, recv_step = 0;
  int64_t sent = 0;          // of the send step's chunk
  int64_t received = 0;      // of the receive step's chunk
  int64_t reduced = 0;       // of it (reduce-scatter): window_ holds [reduced, received)
  while (send_step < steps || recv_step < steps) {
    const int64_t send_total = send_step < steps ? chunks.Bytes(chunks.Sent(send_step)) : 0;
    if (send_step < steps && sent == send_total) {
      ++send_step;
      sent = 0;
      continue;
    }
    const bool scattering = recv_step < n - 1;
    const int64_t recv_total = recv_step < steps ? chunks.Bytes(chunks.Received(recv_step)) : 0;
    if (recv_step < steps && received == recv_total && (!scattering || reduced == recv_total)) {
      done_[recv_step] = recv_total;
      ++recv_step;
      received = reduced = 0;
      continue;
    }
    const int64_t send_ready = send_step == 0    ? paced.Prepared(chunks.Sent(0))
                               : send_step < steps ? done_[send_step - 1]
                                                   : 0;
    pollfd fds[2] = {{sockets_.right(), static_cast<short>(sent < send_ready ? POLLOUT : 0), 0},
                     {sockets_.left(), static_cast<short>(recv_step < steps ? POLLIN : 0), 0}};
    // While the halves within the host have work, the network is only looked at: when it has nothing, a grain
    // of theirs runs.
    const int ready = poll(fds, 2, paced.HasWork(done_) ? 0 : -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return sockets_.Fail(std::string("poll: ") + std::strerror(errno));
    }
    if (ready == 0) {
      paced.RunGrain(done_);
      continue;
    }
    if (fds[0].revents & (POLLOUT | POLLERR | POLLHUP)) {
      msghdr message{};
      message.msg_iov = vector_.data();
      message.msg_iovlen = Vector(chunks.Begin(chunks.Sent(send_step)) + sent, send_ready - sent, send_step == 0);
      const ssize_t bytes = sendmsg(sockets_.right(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (bytes < 0 && errno != EAGAIN && errno != EINTR) {
        return sockets_.Fail("sending to the next host (rank " + std::to_string((rank + 1) % n) + "): " +
                             std::strerror(errno));
      }
      if (bytes > 0) sent += bytes;
    }
    if (fds[1].revents & (POLLIN | POLLERR | POLLHUP)) {
      const int64_t begin = chunks.Begin(chunks.Received(recv_step));
      msghdr message{};
      iovec into{};
      // Reduce-scatter bytes land in the window (from its start once all before them are reduced), all-gather
      // bytes in the outputs themselves.
      const int64_t kept = received - reduced;  // a partial element at most, or bytes below the reduce grain
      if (scattering) {
        into = iovec{window_.data() + kept, static_cast<size_t>(std::min(recv_total - received, window_bytes_ - kept))};
        message.msg_iov = &into;
        message.msg_iovlen = 1;
      } else {
        message.msg_iov = vector_.data();
        message.msg_iovlen = Vector(begin + received, recv_total - received, /*input=*/false);
      }
      const ssize_t bytes = recvmsg(sockets_.left(), &message, MSG_DONTWAIT);
      if (bytes == 0 || (bytes < 0 && errno != EAGAIN && errno != EINTR)) {
        return sockets_.Fail("receiving from the previous host (rank " + std::to_string((rank - 1 + n) % n) + "): " +
                             (bytes == 0 ? std::string("it closed the connection") : std::strerror(errno)));
      }
      if (bytes > 0) {
        received += bytes;
        NoteProgress();
        if (!scattering) {
          done_[recv_step] = received;
        } else {
          const int64_t whole = (received - reduced) / element * element;
          if (whole >= kReduceGrain || received == recv_total || kept + bytes == window_bytes_) {
            paced.PrepareUpTo(chunks.Received(recv_step), reduced + whole);
            layout_.Reduce(begin + reduced, whole, window_.data(), /*from_output=*/false, dtype, op);
            const int64_t rest = received - reduced - whole;
            if (rest > 0) std::memmove(window_.data(), window_.data() + whole, static_cast<size_t>(rest));
            reduced += whole;
            done_[recv_step] = reduced;
          }
        }
      }
    }
  }
  paced.Finish(done_);
  return "";
}

}  // namespace hvdlite
