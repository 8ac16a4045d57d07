#include "tcp_ring_allreduce.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "../progress_watchdog.h"
#include "../transport/ring_sockets.h"

namespace hvdlite {
namespace {

constexpr int kMaxVectors = 64;               // runs per system call
constexpr int64_t kMaxBytesPerCall = 8 << 20;  // bytes per system call
constexpr int64_t kReduceGrain = 256 << 10;    // reduce received bytes in pieces of at least this much

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

std::string TcpRingAllreduce::Failed(const std::string &what) {
  // Closing ends the neighbours' waits with an error too, and theirs their neighbours': every host fails now.
  sockets_.Close(what);
  return "the ring across hosts failed: " + what;
}

std::string TcpRingAllreduce::RunPieces(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count,
                                        DataType dtype, ReduceOp op) {
  if (CopyIfTrivial(ctx, pieces, count)) return "";
  if (!sockets_.connected()) return "the ring across hosts is closed: " + sockets_.closed_because();
  layout_.Reset(pieces);
  const int n = ctx.size, rank = ctx.rank, steps = 2 * (n - 1);
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  auto chunk_begin = [&](int c) { return count * c / n * element; };
  auto chunk_bytes = [&](int c) { return chunk_begin(c + 1) - chunk_begin(c); };
  // Steps 0..n-2 reduce-scatter, n-1.. all-gather (RingAllreduce's chunks). What step t sends is what step t-1
  // received: its bytes leave as soon as done_[t-1] says they are there.
  auto send_chunk = [&](int t) { return t < n - 1 ? (rank - t + n) % n : (rank + 1 - (t - (n - 1)) + n) % n; };
  auto recv_chunk = [&](int t) { return t < n - 1 ? (rank - t - 1 + n) % n : (rank - (t - (n - 1)) + n) % n; };
  if (static_cast<int64_t>(window_.size()) < window_bytes_) window_.resize(window_bytes_);
  done_.assign(steps, 0);

  int send_step = 0, recv_step = 0;
  int64_t sent = 0;          // of the send step's chunk
  int64_t received = 0;      // of the receive step's chunk
  int64_t reduced = 0;       // of it (reduce-scatter): window_ holds [reduced, received)
  while (send_step < steps || recv_step < steps) {
    const int64_t send_total = send_step < steps ? chunk_bytes(send_chunk(send_step)) : 0;
    if (send_step < steps && sent == send_total) {
      ++send_step;
      sent = 0;
      continue;
    }
    const bool scattering = recv_step < n - 1;
    const int64_t recv_total = recv_step < steps ? chunk_bytes(recv_chunk(recv_step)) : 0;
    if (recv_step < steps && received == recv_total && (!scattering || reduced == recv_total)) {
      done_[recv_step] = recv_total;
      ++recv_step;
      received = reduced = 0;
      continue;
    }
    const int64_t send_ready = send_step == 0 ? send_total : send_step < steps ? done_[send_step - 1] : 0;
    pollfd fds[2] = {{sockets_.right(), static_cast<short>(sent < send_ready ? POLLOUT : 0), 0},
                     {sockets_.left(), static_cast<short>(recv_step < steps ? POLLIN : 0), 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return Failed(std::string("poll: ") + std::strerror(errno));
    }
    if (fds[0].revents & (POLLOUT | POLLERR | POLLHUP)) {
      msghdr message{};
      message.msg_iov = vector_.data();
      message.msg_iovlen = Vector(chunk_begin(send_chunk(send_step)) + sent, send_ready - sent, send_step == 0);
      const ssize_t bytes = sendmsg(sockets_.right(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (bytes < 0 && errno != EAGAIN && errno != EINTR) {
        return Failed("sending to the next host (rank " + std::to_string((rank + 1) % n) + "): " + std::strerror(errno));
      }
      if (bytes > 0) sent += bytes;
    }
    if (fds[1].revents & (POLLIN | POLLERR | POLLHUP)) {
      const int64_t begin = chunk_begin(recv_chunk(recv_step));
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
        return Failed("receiving from the previous host (rank " + std::to_string((rank - 1 + n) % n) + "): " +
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
  return "";
}

}  // namespace hvdlite
