// An all-gather of one equal-sized block per rank around the ring's TCP connections (transport/ring_sockets.h), both
// ways at once: each rank sends its own block to both neighbours and passes on what arrives, so a block travels at
// most n/2 hops and a block's bytes go on as soon as they arrive. Waits block in poll().
//
// For the small messages of a negotiation round across hosts, where MPI's all-reduce busy-polls for as long as a peer
// still computes (round_across_hosts.h). A gather rather than a reduction along the ring: fewer hops, and each rank
// combines the blocks itself.
#pragma once
#include <cstdint>
#include <string>

#include "base/comm_context.h"

namespace hvdlite {

class RingSockets;

class RingGather {
 public:
  explicit RingGather(RingSockets &sockets) : sockets_(sockets) {}
  // ctx: the ranks the sockets connect (its rank and size; its communicator is not used). blocks: ctx.size blocks of
  // `bytes` each, by rank; this rank's own is in place on entry, every rank's on return. Returns "" or why not: a
  // failure closes the sockets, so that every rank of the ring fails at once rather than waits.
  std::string Run(const CommContext &ctx, uint8_t *blocks, int64_t bytes);

 private:
  RingSockets &sockets_;
};

}  // namespace hvdlite
