// The TCP connections of the ring across hosts: one to this rank's right neighbour and one from its left, opened
// by the core's thread at start-up among the ranks that share a local rank (one per host). Where asked, also one
// to the rank 2^k ahead and one from the rank 2^k behind for every 2^k below the number of ranks, for exchanges
// in log2(n) steps (transport/doubling_exchange.h); k = 0 is the ring's pair.
//
// Why not MPI: MPI's network layers busy-poll while a rank waits for a peer, so a ring across hosts kept a core
// busy for all of its link-bound time, a core the training computation on that host needed. A wait on a socket
// blocks in the kernel (poll), as gloo and NCCL's socket transport do. MPI still starts the job and exchanges the
// addresses; everything else across hosts keeps using it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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
  // accepts its left one (with doubling, likewise at every distance 2^k); both ends check the other's nonce, rank
  // and distance. Every rank ends connected, or none (they agree): returns "" or why not, the reason of the first
  // rank that failed.
  std::string Connect(const CommContext &ctx, const std::string &interfaces, double timeout_seconds,
                      bool doubling = false);
  bool connected() const { return !ahead_.empty(); }
  int right() const { return ahead(0); }
  int left() const { return behind(0); }
  // The connections to the rank 2^k ahead and from the rank 2^k behind; k < distances().
  int ahead(int k) const { return k < distances() ? ahead_[k] : -1; }
  int behind(int k) const { return k < distances() ? behind_[k] : -1; }
  int distances() const { return static_cast<int>(ahead_.size()); }
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
  std::string ConnectHere(const CommContext &ctx, const std::string &interfaces, double timeout_seconds,
                          bool doubling);

  std::vector<int> ahead_, behind_;  // by k: to rank + 2^k, from rank - 2^k (empty: not connected)
  std::string closed_because_ = "never connected";
};

}  // namespace hvdlite
