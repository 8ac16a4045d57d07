#include "transport/ring_gather.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/progress_watchdog.h"
#include "transport/ring_sockets.h"

namespace hvdlite {
namespace {

// One way around the ring: step s sends the block of rank - s x way (its own first) and receives that of
// rank - (s + 1) x way; what a step sends is what the step before received.
struct Way {
  int send_fd, receive_fd;
  int way;  // +1: to the right (blocks of the ranks on the left arrive), -1: to the left
  int steps;
  int send_step = 0, receive_step = 0;
  int64_t sent = 0, received = 0;

  bool done() const { return send_step == steps && receive_step == steps; }
  // Bytes of the current send step's block that this rank has.
  int64_t SendReady(int64_t bytes) const {
    if (send_step == steps) return 0;
    if (send_step == 0 || receive_step >= send_step) return bytes;
    return receive_step == send_step - 1 ? received : 0;
  }
  void Advance(int64_t bytes) {
    while (send_step < steps && sent == bytes) {
      ++send_step;
      sent = 0;
    }
    while (receive_step < steps && received == bytes) {
      ++receive_step;
      received = 0;
    }
  }
};

}  // namespace

std::string RingGather::Run(const CommContext &ctx, uint8_t *blocks, int64_t bytes) {
  const int n = ctx.size, rank = ctx.rank;
  if (n == 1 || bytes == 0) return "";
  if (!sockets_.connected()) return sockets_.ClosedError();
  // Both ways at once (each connection carries bytes both ways): a block goes at most n/2 hops, and each
  // connection carries half the blocks in each direction.
  Way ways[2] = {{sockets_.right(), sockets_.left(), +1, n / 2}, {sockets_.left(), sockets_.right(), -1, (n - 1) / 2}};
  auto block = [&](int owner) { return blocks + static_cast<int64_t>((owner % n + n) % n) * bytes; };
  auto neighbour = [&](int fd) { return std::to_string(((fd == sockets_.right() ? rank + 1 : rank - 1) % n + n) % n); };
  while (!ways[0].done() || !ways[1].done()) {
    // Small blocks mostly go at once: try first, wait only when nothing moves.
    bool moved = false;
    for (Way &w : ways) {
      const int64_t ready = w.SendReady(bytes);
      if (w.sent < ready) {
        const ssize_t done = send(w.send_fd, block(rank - w.way * w.send_step) + w.sent,
                                  static_cast<size_t>(ready - w.sent), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (done < 0 && errno != EAGAIN && errno != EINTR) {
          return sockets_.Fail("sending to host rank " + neighbour(w.send_fd) + ": " + std::strerror(errno));
        }
        if (done > 0) {
          w.sent += done;
          moved = true;
        }
      }
      if (w.receive_step < w.steps) {
        const ssize_t done = recv(w.receive_fd, block(rank - w.way * (w.receive_step + 1)) + w.received,
                                  static_cast<size_t>(bytes - w.received), MSG_DONTWAIT);
        if (done == 0 || (done < 0 && errno != EAGAIN && errno != EINTR)) {
          return sockets_.Fail("receiving from host rank " + neighbour(w.receive_fd) + ": " +
                               (done == 0 ? std::string("it closed the connection") : std::strerror(errno)));
        }
        if (done > 0) {
          w.received += done;
          moved = true;
          NoteProgress();
        }
      }
      w.Advance(bytes);
    }
    if (moved) continue;
    pollfd fds[2] = {{sockets_.right(), 0, 0}, {sockets_.left(), 0, 0}};
    for (Way &w : ways) {
      pollfd &send_end = w.send_fd == fds[0].fd ? fds[0] : fds[1];
      pollfd &receive_end = w.receive_fd == fds[0].fd ? fds[0] : fds[1];
      if (w.sent < w.SendReady(bytes)) send_end.events |= POLLOUT;
      if (w.receive_step < w.steps) receive_end.events |= POLLIN;
    }
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return sockets_.Fail(std::string("poll: ") + std::strerror(errno));
  }
  return "";
}

}  // namespace hvdlite
