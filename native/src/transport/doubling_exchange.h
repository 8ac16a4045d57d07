// An exchange in log2(n) steps over the connections at doubling distances (transport/ring_sockets.h): step k sends
// this rank's block to the rank 2^k ahead and receives the block of the rank 2^k behind, both at once, and the
// caller folds what arrived into its own before the next step sends it. After ceil(log2(n)) steps every rank's
// block has folded in every rank's, some more than once (dissemination: for idempotent folds such as AND, any n).
// Waits block in poll().
//
// For the negotiation round across hosts from many hosts (round_across_hosts.h), where the ring's gather takes n/2
// hops and this log2(n).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "base/comm_context.h"

namespace hvdlite {

class RingSockets;

class DoublingExchange {
 public:
  explicit DoublingExchange(RingSockets &sockets) : sockets_(sockets) {}
  // Steps needed for n ranks.
  static int Steps(int n);
  // ctx: the ranks the sockets connect (its rank and size). mine and theirs: `bytes` each; fold(k) combines theirs
  // (the block received at step k) into mine. Returns "" or why not: a failure closes the sockets, so that every
  // rank fails at once rather than waits.
  std::string Run(const CommContext &ctx, uint8_t *mine, uint8_t *theirs, int64_t bytes,
                  const std::function<void(int step)> &fold);

 private:
  // One step: sends mine to ahead(k) while it receives theirs from behind(k).
  std::string Step(const CommContext &ctx, int k, const uint8_t *mine, uint8_t *theirs, int64_t bytes);

  RingSockets &sockets_;
};

}  // namespace hvdlite
