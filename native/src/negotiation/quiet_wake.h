// Quiet: when a round shows that no rank has anything to do, every rank stops running rounds until one of
// them gets work; then every rank wakes within ceil(log2(size)) hops of wake messages, and the first round awake
// brings them all back into step.
//
// Wakes travel at doubling distances: a rank leaving quiet, by work of its own or by a wake, sends one zero-byte
// wake to each rank 1, 2, 4, ... ahead of it, so a rank d ahead of the first waker is woken by the one
// d - 2^floor(log2 d) ahead of it, and so on back to the waker. Every rank leaves every quiet spell, so each sends
// exactly one wake to each rank ahead and gets exactly one from each rank behind: the first round awake takes
// them all and none is left to be mistaken for a later spell's, with nothing in the round to say who woke whom.
// Each rank talks to 2 ceil(log2(size)) others, not to every other (as a wake from each waker straight to every
// rank would): MPI's connections, made at Start, and the messages per spell grow as log2 of the ranks.
//
// Every receive names its sender: a quiet rank posts one receive per rank behind. Receives from MPI_ANY_SOURCE
// were lost on MPICH's UCX network layer over TCP (a rank waited forever for a wake its peer had sent), while
// receives from a named peer, and their cancellation, work on every layer.
//
// Each rank exchanges a message with those it wakes and is woken by when the core starts (Connect), so that a wake
// later finds MPI's connection between them made: MPICH's network layers make it on the first message, which then
// needs both ranks to drive MPI's progress, and the rank to be woken may be waiting elsewhere, in a round across
// hosts over the ring's TCP connections (round_across_hosts.h) for the very rank trying to wake it: from 8 hosts of
// one rank each, the waker's MPI_Isend blocked for good in most jobs before the connections were made first.
//
// A quiet rank looks for wakes less often the longer it has been quiet (Rest: as long as it has been quiet, at most
// kMaxRest), and a submission of its own ends the rest at once. Looking at every cycle woke each idle rank's thread
// 1000 times a second at the default cycle, and a training step's computation lost more to the thread pre-empting
// it than the thread's own CPU time (docs/decisions/negotiation-rounds-on-the-background-thread.md). A rank with no
// work of its own is woken later by resting ranks on the way (in a training step every rank gets its own gradients
// and wakes itself); nothing waits for it but rounds that could complete nothing without its work.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "base/types.h"

namespace hvdlite {

class QuietWake {
 public:
  static constexpr auto kMaxRest = std::chrono::milliseconds(10);

  // Wake messages travel on a communicator of their own (a duplicate of world), apart from everything else.
  // Collective: connects each rank with the ranks at doubling distances ahead and behind it.
  void Start(MPI_Comm world);
  void Stop();  // cancels what quiet posted and frees the communicator
  bool quiet() const { return quiet_; }
  // How long a quiet rank waits before it looks for wakes again (zero when not quiet).
  Clock::duration Rest(Clock::time_point now) const {
    return quiet_ ? std::min<Clock::duration>(now - quiet_since_, kMaxRest) : Clock::duration::zero();
  }
  // Posts a receive from each rank behind and stops cycling.
  void GoQuiet();
  // Whether the wake of some rank behind has arrived.
  bool WokenByPeer();
  // This rank leaves quiet (work of its own, or woken): a wake to each rank ahead, before it enters the first
  // round awake, so every rank is woken before that round needs it.
  void WakePeers();
  // After the first round awake, which every rank entered, so every wake was sent: takes the wake of each rank
  // behind and completes this rank's own.
  void Awake();

 private:
  static constexpr int kWakeTag = 1;
  static constexpr int kConnectTag = 2;
  void Connect();  // a message each way between this rank and each rank ahead and behind, at Start
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool quiet_ = false;
  Clock::time_point quiet_since_;
  std::vector<int> ahead_, behind_;    // the ranks 1, 2, 4, ... ahead of this one and behind it
  std::vector<MPI_Request> receives_;  // one per rank behind, while quiet
  std::vector<MPI_Request> sends_;     // one per rank ahead, from leaving quiet until Awake
};

}  // namespace hvdlite
