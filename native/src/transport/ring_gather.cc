#include "ring_gather.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "../progress_watchdog.h"
#include "ring_sockets.h"

namespace hvdlite {

std::string RingGather::Failed(const std::string &what) {
  sockets_.Close(what);
  return "the connections across hosts failed: " + what;
}

std::string RingGather::Run(const CommContext &ctx, uint8_t *blocks, int64_t bytes) {
  const int n = ctx.size, rank = ctx.rank, steps = n - 1;
  if (n == 1 || bytes == 0) return "";
  if (!sockets_.connected()) return "the ring across hosts is closed: " + sockets_.closed_because();
  // Step s sends the block of rank - s (its own first) and receives that of rank - 1 - s: what it sends is what
  // the step before received.
  auto block = [&](int owner) { return blocks + static_cast<int64_t>((owner % n + n) % n) * bytes; };
  int send_step = 0, recv_step = 0;
  int64_t sent = 0, received = 0;
  while (send_step < steps || recv_step < steps) {
    if (send_step < steps && sent == bytes) {
      ++send_step;
      sent = 0;
      continue;
    }
    if (recv_step < steps && received == bytes) {
      ++recv_step;
      received = 0;
      continue;
    }
    const int64_t send_ready = send_step == steps        ? 0
                               : send_step == 0          ? bytes
                               : recv_step >= send_step  ? bytes
                               : recv_step == send_step - 1 ? received
                                                            : 0;
    // Small blocks mostly go at once: try first, wait only when neither end can move.
    bool moved = false;
    if (sent < send_ready) {
      const ssize_t done = send(sockets_.right(), block(rank - send_step) + sent, static_cast<size_t>(send_ready - sent),
                                MSG_NOSIGNAL | MSG_DONTWAIT);
      if (done < 0 && errno != EAGAIN && errno != EINTR) {
        return Failed("sending to the next host (rank " + std::to_string((rank + 1) % n) + "): " + std::strerror(errno));
      }
      if (done > 0) {
        sent += done;
        moved = true;
      }
    }
    if (recv_step < steps) {
      const ssize_t done = recv(sockets_.left(), block(rank - 1 - recv_step) + received,
                                static_cast<size_t>(bytes - received), MSG_DONTWAIT);
      if (done == 0 || (done < 0 && errno != EAGAIN && errno != EINTR)) {
        return Failed("receiving from the previous host (rank " + std::to_string((rank - 1 + n) % n) + "): " +
                      (done == 0 ? std::string("it closed the connection") : std::strerror(errno)));
      }
      if (done > 0) {
        received += done;
        moved = true;
        NoteProgress();
      }
    }
    if (moved) continue;
    pollfd fds[2] = {{sockets_.right(), static_cast<short>(sent < send_ready ? POLLOUT : 0), 0},
                     {sockets_.left(), static_cast<short>(recv_step < steps ? POLLIN : 0), 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return Failed(std::string("poll: ") + std::strerror(errno));
  }
  return "";
}

}  // namespace hvdlite
