// The global set's negotiation round across hosts without MPI's busy-polling. MPI_Allreduce across hosts spins (in
// MPICH's progress loop, yielding) for as long as a peer has not reached the round: a peer still computing its
// backward pass, or not running at all where ranks share cores, so the wait took CPU from the ranks' computation,
// and was most of the background thread's CPU time in training across hosts. Here the ranks of a host reduce the
// round over MPI within the host (shared memory, all of them at the round together), then each all-gathers its
// host's result over its ring of TCP connections across hosts (transport/ring_gather.h), waiting in poll() like the
// ring all-reduce beside it, and folds the hosts' results in one fixed order: the order of each host's first rank,
// so the float payloads of eager all-reduces (eager_allreduce.h) come out bitwise equal on every rank, whichever
// ring carried them.
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

#include "algorithms/allreduce_algorithm.h"
#include "transport/ring_gather.h"

namespace hvdlite {

class EagerPlan;
class RingSockets;

class RoundAcrossHosts {
 public:
  // Collective over every rank of the job (rank: its rank there). local: this host's ranks; cross: one rank per host,
  // those the connected sockets join.
  void Start(int rank, const CommContext &local, const CommContext &cross, RingSockets &sockets);
  void Stop();  // frees what Start made; before MPI ends
  bool started() const { return gather_ != nullptr; }
  // In place over [header | payload] of NegotiationRound: AND on the header words, the eager plan's reduction of
  // each slot on the payload; the same bits and bytes on every rank, or the job ends.
  void Allreduce(uint64_t *buffer, int32_t header_words, EagerPlan &eager);

 private:
  [[noreturn]] void Fail(const std::string &why) const;

  MPI_Comm local_ = MPI_COMM_NULL;  // a duplicate of the host's communicator, for the rounds alone
  int local_size_ = 1;
  CommContext cross_{MPI_COMM_NULL, 0, 1};
  std::unique_ptr<RingGather> gather_;
  std::vector<int32_t> fold_order_;  // the cross ranks by their host's first world rank
  std::vector<uint64_t> blocks_;     // one block per host: [round number, words, the host's buffer]
  uint64_t round_ = 0;
};

}  // namespace hvdlite
