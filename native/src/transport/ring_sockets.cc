#include "transport/ring_sockets.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

namespace hvdlite {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int kMaxAddresses = 8;
constexpr double kPerAddressSeconds = 3;  // an address that does not answer in this long is tried no more

// What each rank tells the others (MPI_Allgather'd as bytes; every rank runs the same build).
struct Card {
  uint32_t port = 0;  // network order; 0: this rank could not listen
  uint32_t count = 0;
  uint32_t address[kMaxAddresses] = {};  // network order
  uint32_t netmask[kMaxAddresses] = {};
};

// The first message on a connection, each way.
struct Hello {
  uint64_t nonce;
  int32_t rank;
  int32_t distance;  // how many ranks ahead of the connecting rank the accepting one is
};

std::string Errno(const char *what) { return std::string(what) + ": " + std::strerror(errno); }

std::string AddressText(uint32_t address, uint32_t port) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{address};
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(static_cast<uint16_t>(port)));
}

bool Named(const std::string &interfaces, const char *name) {
  if (interfaces.empty()) return true;
  std::stringstream list(interfaces);
  for (std::string item; std::getline(list, item, ',');) {
    if (item == name) return true;
  }
  return false;
}

// This host's IPv4 addresses on interfaces that are up, loopback last (it reaches another host only where two
// "hosts" are one machine, and the handshake rejects anything else it reaches).
void LocalAddresses(const std::string &interfaces, Card *card) {
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0) return;
  for (int pass = 0; pass < 2; ++pass) {
    for (ifaddrs *i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
      if (static_cast<bool>(i->ifa_flags & IFF_LOOPBACK) != (pass == 1) || !Named(interfaces, i->ifa_name)) continue;
      if (card->count == kMaxAddresses) break;
      card->address[card->count] = reinterpret_cast<sockaddr_in *>(i->ifa_addr)->sin_addr.s_addr;
      card->netmask[card->count] =
          i->ifa_netmask ? reinterpret_cast<sockaddr_in *>(i->ifa_netmask)->sin_addr.s_addr : 0xffffffffu;
      ++card->count;
    }
  }
  freeifaddrs(list);
}

// The peer's addresses, those on a subnet this host is on first.
std::vector<uint32_t> AddressesToTry(const Card &mine, const Card &theirs) {
  std::vector<uint32_t> near, far;
  for (uint32_t i = 0; i < theirs.count && i < kMaxAddresses; ++i) {
    bool shared = false;
    for (uint32_t j = 0; j < mine.count; ++j) {
      shared |= (theirs.address[i] & mine.netmask[j]) == (mine.address[j] & mine.netmask[j]);
    }
    (shared ? near : far).push_back(theirs.address[i]);
  }
  near.insert(near.end(), far.begin(), far.end());
  return near;
}

int MillisecondsLeft(SteadyClock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

// Waits until fd is ready for events or the deadline passes.
bool WaitFor(int fd, short events, SteadyClock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ready = poll(&p, 1, MillisecondsLeft(deadline));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return false;
  }
}

std::string Transfer(int fd, void *data, size_t bytes, bool send, SteadyClock::time_point deadline) {
  auto *at = static_cast<uint8_t *>(data);
  while (bytes > 0) {
    if (!WaitFor(fd, send ? POLLOUT : POLLIN, deadline)) return send ? "timed out sending" : "timed out receiving";
    const ssize_t done = send ? ::send(fd, at, bytes, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, at, bytes, MSG_DONTWAIT);
    if (done == 0) return "the peer closed the connection";
    if (done < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Errno(send ? "send" : "recv");
    }
    at += done;
    bytes -= static_cast<size_t>(done);
  }
  return "";
}

void SetNoDelay(int fd) {
  int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

// A connection to address:port (TCP only; the handshake comes after), or -1 with *error set.
int ConnectTo(uint32_t address, uint32_t port, SteadyClock::time_point deadline, std::string *error) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *error = Errno("socket");
    return -1;
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = static_cast<in_port_t>(port);
  to.sin_addr.s_addr = address;
  if (connect(fd, reinterpret_cast<sockaddr *>(&to), sizeof(to)) != 0 && errno != EINPROGRESS) {
    *error = AddressText(address, port) + ": " + std::strerror(errno);
    close(fd);
    return -1;
  }
  int status = 0;
  socklen_t length = sizeof(status);
  if (!WaitFor(fd, POLLOUT, deadline)) {
    *error = AddressText(address, port) + ": no answer";
    close(fd);
    return -1;
  }
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &length);
  if (status != 0) {
    *error = AddressText(address, port) + ": " + std::strerror(status);
    close(fd);
    return -1;
  }
  SetNoDelay(fd);
  return fd;
}

}  // namespace

void RingSockets::Close(const std::string &why) {
  if (ahead_.empty() && behind_.empty()) return;
  for (int fd : ahead_) {
    if (fd >= 0) close(fd);
  }
  for (int fd : behind_) {
    if (fd >= 0) close(fd);
  }
  ahead_.clear();
  behind_.clear();
  closed_because_ = why;
}

std::string RingSockets::Connect(const CommContext &ctx, const std::string &interfaces, double timeout_seconds,
                                 bool doubling) {
  std::string error = ConnectHere(ctx, interfaces, timeout_seconds, doubling);
  // Every rank connected, or none uses the connections: the first rank that failed says why.
  int first_failed = error.empty() ? ctx.size : ctx.rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, ctx.comm);
  if (first_failed == ctx.size) return "";
  char reason[512] = {};
  if (ctx.rank == first_failed) std::snprintf(reason, sizeof(reason), "%s", error.c_str());
  MPI_Bcast(reason, sizeof(reason), MPI_CHAR, first_failed, ctx.comm);
  Close("never connected");
  return "rank " + std::to_string(first_failed) + " of the ranks across hosts: " + reason;
}

std::string RingSockets::ConnectHere(const CommContext &ctx, const std::string &interfaces, double timeout_seconds,
                                     bool doubling) {
  Close("reconnecting");
  const auto deadline =
      SteadyClock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  uint64_t nonce = 0;
  if (ctx.rank == 0) nonce = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  MPI_Bcast(&nonce, 1, MPI_UINT64_T, 0, ctx.comm);

  Card mine;
  std::string error;
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof(any);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr *>(&any), sizeof(any)) != 0 ||
      listen(listener, SOMAXCONN) != 0 || getsockname(listener, reinterpret_cast<sockaddr *>(&any), &length) != 0) {
    error = Errno("listening for the previous hosts' connections");
  } else {
    mine.port = any.sin_port;
    LocalAddresses(interfaces, &mine);
    if (mine.count == 0) {
      error = "no IPv4 address on " + (interfaces.empty() ? std::string("any interface") : "interfaces " + interfaces);
    }
  }
  std::vector<Card> cards(ctx.size);
  MPI_Allgather(&mine, sizeof(Card), MPI_BYTE, cards.data(), sizeof(Card), MPI_BYTE, ctx.comm);
  std::vector<int32_t> distances = {1};
  while (doubling && distances.back() * 2 < ctx.size) distances.push_back(distances.back() * 2);
  const int count = static_cast<int>(distances.size());
  std::vector<int> ahead(count, -1), behind(count, -1);
  auto peer = [&](int k, int way) { return ((ctx.rank + way * distances[k]) % ctx.size + ctx.size) % ctx.size; };
  auto named = [&](int k, int way) {
    const std::string which = distances[k] == 1 ? (way > 0 ? "the next host" : "the previous host")
                                                : "the host " + std::to_string(distances[k]) +
                                                      (way > 0 ? " ahead" : " behind");
    return which + " (rank " + std::to_string(peer(k, way)) + ")";
  };

  // Connect and say hello to every host ahead, then take the connections of those behind, then read the answers:
  // every rank connects before it waits for anyone's answer, so the handshakes cannot wait on each other.
  for (int k = 0; k < count && error.empty(); ++k) {
    const Card &theirs = cards[peer(k, +1)];
    if (theirs.port == 0) {
      error = named(k, +1) + " cannot listen";
      break;
    }
    std::string tried;
    for (uint32_t address : AddressesToTry(mine, theirs)) {
      const auto until = std::min(deadline, SteadyClock::now() + std::chrono::milliseconds(
                                                                       static_cast<int64_t>(kPerAddressSeconds * 1000)));
      std::string why;
      ahead[k] = ConnectTo(address, theirs.port, until, &why);
      if (ahead[k] >= 0) break;
      tried += (tried.empty() ? "" : "; ") + why;
    }
    if (ahead[k] < 0) {
      error = "cannot reach " + named(k, +1) + ": " + tried;
      break;
    }
    const Hello hello{nonce, ctx.rank, distances[k]};
    error = Transfer(ahead[k], const_cast<Hello *>(&hello), sizeof(hello), true, deadline);
  }
  for (int waiting = count; error.empty() && waiting > 0;) {
    if (!WaitFor(listener, POLLIN, deadline)) {
      for (int k = count - 1; k >= 0; --k) {
        if (behind[k] < 0) error = named(k, -1) + " did not connect in time";
      }
      break;
    }
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Hello theirs{};
    int k = -1;
    if (Transfer(fd, &theirs, sizeof(theirs), false, deadline).empty() && theirs.nonce == nonce) {
      for (int i = 0; i < count; ++i) {
        if (distances[i] == theirs.distance && peer(i, -1) == theirs.rank && behind[i] < 0) k = i;
      }
    }
    const Hello answer{nonce, ctx.rank, k >= 0 ? distances[k] : 0};
    if (k >= 0 && Transfer(fd, const_cast<Hello *>(&answer), sizeof(answer), true, deadline).empty()) {
      SetNoDelay(fd);
      behind[k] = fd;
      --waiting;
    } else {
      close(fd);  // something else reached the port: not this job's rank behind
    }
  }
  for (int k = 0; k < count && error.empty(); ++k) {
    Hello answer{};
    error = Transfer(ahead[k], &answer, sizeof(answer), false, deadline);
    if (error.empty() && (answer.nonce != nonce || answer.rank != peer(k, +1) || answer.distance != distances[k])) {
      error = "the address tried for " + named(k, +1) + " reached another program";
    } else if (!error.empty()) {
      error = "handshake with " + named(k, +1) + ": " + error;
    }
  }
  if (listener >= 0) close(listener);
  ahead_ = std::move(ahead);
  behind_ = std::move(behind);
  if (!error.empty()) {
    Close("never connected");
  } else {
    // From here the connections send and receive without blocking (MSG_DONTWAIT) and wait in poll.
    closed_because_.clear();
  }
  return error;
}

}  // namespace hvdlite
