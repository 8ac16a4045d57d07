// The TCP connections of the ring across hosts: one to this rank's right neighbour and one from its left, opened
// by the core's thread at start-up among the ranks that share a local rank (one per host).
//
// Why not MPI: MPI's network layers busy-poll while a rank waits for a peer, so a ring across hosts kept a core
// busy for all of its link-bound time, a core the training computation on that host needed. A wait on a socket
// blocks in the kernel (poll), as gloo and NCCL's socket transport do. MPI still starts the job and exchanges the
// addresses; everything else across hosts keeps using it.
#pragma once
#include <cstdint>
#include <string>

#include "base/comm_context.h"

namespace hvdlite {

class RingSockets {
 public:
  RingSockets() = default;
  RingSockets(const RingSockets &) = delete;
  RingSockets &operator=(const RingSockets &) = delete;
  ~RingSockets() { Close("closed"); }

  // Collective over ctx.comm. Each rank listens on a port of its host, the ranks exchange their hosts' IPv4
  // addresses (those of the interfaces named in `interfaces`, comma-separated, or of all when empty), port and
  // the job's nonce, then each connects to its right neighbour (addresses on a subnet it shares first) and
  // accepts its left one; both ends check the other's nonce and rank. Every rank ends connected, or none (they
  // agree): returns "" or why not, the reason of the first rank that failed.
  std::string Connect(const CommContext &ctx, const std::string &interfaces, double timeout_seconds);
  bool connected() const { return right_ >= 0; }
  int right() const { return right_; }
  int left() const { return left_; }
  // Closes both connections: a neighbour's wait on them ends with an error at once, and so on around the ring, so
  // a ring that failed on one host fails on every host instead of waiting for it. Later calls see why.
  void Close(const std::string &why);
  const std::string &closed_because() const { return closed_because_; }
  // What a collective over the ring returns: Fail closes the connections (every host fails now) and says what
  // failed; ClosedError is the answer of a collective started after they closed.
  std::string Fail(const std::string &what) {
    Close(what);
    return "the ring across hosts failed: " + what;
  }
  std::string ClosedError() const { return "the ring across hosts is closed: " + closed_because_; }

 private:
  std::string ConnectHere(const CommContext &ctx, const std::string &interfaces, double timeout_seconds);

  int right_ = -1, left_ = -1;
  std::string closed_because_ = "never connected";
};

}  // namespace hvdlite
