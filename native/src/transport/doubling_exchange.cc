#include "transport/doubling_exchange.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/progress_watchdog.h"
#include "transport/ring_sockets.h"

namespace hvdlite {

int DoublingExchange::Steps(int n) {
  int steps = 0;
  for (int reach = 1; reach < n; reach *= 2) ++steps;
  return steps;
}

std::string DoublingExchange::Run(const CommContext &ctx, uint8_t *mine, uint8_t *theirs, int64_t bytes,
                                  const std::function<void(int step)> &fold) {
  if (ctx.size == 1 || bytes == 0) return "";
  if (!sockets_.connected()) return sockets_.ClosedError();
  const int steps = Steps(ctx.size);
  if (sockets_.distances() < steps) {
    return "the connections at doubling distances are not open (" + std::to_string(sockets_.distances()) + " of " +
           std::to_string(steps) + ")";
  }
  for (int k = 0; k < steps; ++k) {
    const std::string failed = Step(ctx, k, mine, theirs, bytes);
    if (!failed.empty()) return failed;
    fold(k);
  }
  return "";
}

std::string DoublingExchange::Step(const CommContext &ctx, int k, const uint8_t *mine, uint8_t *theirs,
                                   int64_t bytes) {
  const int to = sockets_.ahead(k), from = sockets_.behind(k);
  const int distance = 1 << k;
  auto rank_of = [&](int way) { return std::to_string(((ctx.rank + way * distance) % ctx.size + ctx.size) % ctx.size); };
  int64_t sent = 0, received = 0;
  while (sent < bytes || received < bytes) {
    // Small blocks mostly go at once: try first, wait only when nothing moves.
    bool moved = false;
    if (sent < bytes) {
      const ssize_t done = send(to, mine + sent, static_cast<size_t>(bytes - sent), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (done < 0 && errno != EAGAIN && errno != EINTR) {
        return sockets_.Fail("sending to host rank " + rank_of(+1) + ": " + std::strerror(errno));
      }
      if (done > 0) {
        sent += done;
        moved = true;
      }
    }
    if (received < bytes) {
      const ssize_t done = recv(from, theirs + received, static_cast<size_t>(bytes - received), MSG_DONTWAIT);
      if (done == 0 || (done < 0 && errno != EAGAIN && errno != EINTR)) {
        return sockets_.Fail("receiving from host rank " + rank_of(-1) + ": " +
                             (done == 0 ? std::string("it closed the connection") : std::strerror(errno)));
      }
      if (done > 0) {
        received += done;
        moved = true;
        NoteProgress();
      }
    }
    if (moved) continue;
    // A finished end is left out (fd -1): a peer that hung up after its part must not wake this wait again and again.
    pollfd fds[2] = {{sent < bytes ? to : -1, POLLOUT, 0}, {received < bytes ? from : -1, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return sockets_.Fail(std::string("poll: ") + std::strerror(errno));
  }
  return "";
}

}  // namespace hvdlite
