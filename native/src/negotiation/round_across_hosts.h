// The global set's negotiation round across hosts without MPI's busy-polling. MPI_Allreduce across hosts spins (in
// MPICH's progress loop, yielding) for as long as a peer has not reached the round: a peer still computing its
// backward pass, or not running at all where ranks share cores, so the wait took CPU from the ranks' computation,
// and was most of the background thread's CPU time in training across hosts. Here the ranks of a host AND the
// round's bits over MPI within the host (shared memory), then each all-gathers its host's bits over its ring of TCP
// connections across hosts (transport/ring_gather.h), waiting in poll() like the ring all-reduce beside it, and ANDs
// the hosts' bits. From HVDLITE_ROUND_DOUBLING_MIN_HOSTS hosts the step across hosts is an AND by dissemination
// over connections at doubling distances instead (transport/doubling_exchange.h): log2(h) hops where the ring's
// gather takes h/2 (measured: docs/decisions/rounds-in-log-steps.md). AND is exact: the bits are the same either way.
//
// Only rounds of bits: a round whose payload carries small all-reduces' values (eager_allreduce.h) still goes by
// MPI_Allreduce, whose reduce-scatter sends fewer bytes than a gather and whose polling answers sooner. Such rounds
// are loops of small synchronous all-reduces, where the ranks arrive together; over the connections a synchronous
// 16 KiB all-reduce on 4 hosts took twice as long.
//
// Every rank runs each round, so the rings' streams stay in step; each block leads with the round's number and
// length, and a block that disagrees ends the job, as a broken connection does: a round cannot be taken back once
// some rank has acted on it, and a peer whose connection broke is gone (MPI_Abort, as MPI's own errors do).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/comm_context.h"
#include "transport/doubling_exchange.h"
#include "transport/ring_gather.h"

namespace hvdlite {

class RingSockets;

class RoundAcrossHosts {
 public:
  // Collective over every rank. local: this host's ranks; cross: one rank per host, those the connected sockets join.
  // doubling: by dissemination over the sockets' doubling distances (opened), else the ring's gather.
  void Start(const CommContext &local, const CommContext &cross, RingSockets &sockets, bool doubling);
  void Stop();  // frees what Start made; before MPI ends
  // AND of `words` words over every rank, in place; the same bits on every rank, or the job ends.
  void Allreduce(uint64_t *bits, int32_t words);

 private:
  [[noreturn]] void Fail(const std::string &why) const;
  // Writes this rank's block: the round's number and length, then its bits.
  void Lead(uint64_t *block, const uint64_t *bits, int32_t words) const;
  // Ends the job unless a host's block leads with this round's number and length.
  void Check(const uint64_t *block, int host, int32_t words) const;
  void AcrossHostsByGather(uint64_t *bits, int32_t words);
  void AcrossHostsByDoubling(uint64_t *bits, int32_t words);

  MPI_Comm local_ = MPI_COMM_NULL;  // a duplicate of the host's communicator, for the rounds alone
  CommContext cross_{MPI_COMM_NULL, 0, 1};
  std::unique_ptr<RingGather> gather_;          // the ring's gather, or
  std::unique_ptr<DoublingExchange> doubling_;  // dissemination at doubling distances
  // A block is [round number, words, bits]. The gather: one per host; dissemination: this rank's and the one received.
  std::vector<uint64_t> blocks_;
  uint64_t round_ = 0;
};

}  // namespace hvdlite
