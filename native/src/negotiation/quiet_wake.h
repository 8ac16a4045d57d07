// Quiet: when a round shows that no rank has anything to do, every rank stops running rounds until one of
// them gets work and sends each of the others a wake message; the first round awake then tells every rank which
// peers sent one, so each takes exactly those and no stale wake is left to be mistaken for a later one.
//
// Every receive names its sender: a quiet rank posts one receive per peer. Receives from MPI_ANY_SOURCE were
// lost on MPICH's UCX network layer over TCP (a rank waited forever for a wake its peer had sent), while
// receives from a named peer, and their cancellation, work on every layer.
//
// Every two ranks exchange a message when quiet starts (Connect), so that a wake later finds MPI's connection
// between them made: MPICH's network layers make it on the first message, which then needs both ranks to drive
// MPI's progress, and the rank to be woken may be waiting elsewhere, in a round across hosts over the ring's TCP
// connections (round_across_hosts.h) for the very rank trying to wake it: from 8 hosts of one rank each, the
// waker's MPI_Isend blocked for good in most jobs.
//
// A quiet rank looks for wakes less often the longer it has been quiet (Rest: as long as it has been quiet, at most
// kMaxRest), and a submission of its own ends the rest at once. Looking at every cycle woke each idle rank's thread
// 1000 times a second at the default cycle, and a training step's computation lost more to the thread pre-empting
// it than the thread's own CPU time (docs/decisions/negotiation-rounds-on-the-background-thread.md). A peer that
// wakes a resting rank waits longer only where the resting rank has no work of its own (in a training step every
// rank gets its own gradients and wakes itself), at most about as long as the rank had been quiet, and never more
// than kMaxRest.
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
  void Start(MPI_Comm world);
  void Stop();  // cancels what quiet posted and frees the communicator
  bool quiet() const { return quiet_; }
  // How long a quiet rank waits before it looks for wakes again (zero when not quiet).
  Clock::duration Rest(Clock::time_point now) const {
    return quiet_ ? std::min<Clock::duration>(now - quiet_since_, kMaxRest) : Clock::duration::zero();
  }
  // Posts a receive from every peer and stops cycling.
  void GoQuiet();
  // This rank has work: a wake message to every peer. It stays quiet until the round (then Awake).
  void WakePeers();
  // Whether some peer's wake message has arrived.
  bool WokenByPeer();
  // After the first round awake. woke_me(r): whether rank r sent this rank a wake before that round. Takes
  // those messages, cancels the other receives, completes this rank's own sends.
  template <typename WokeMe>
  void Awake(WokeMe woke_me) {
    for (int r = 0; r < static_cast<int>(receives_.size()); ++r) {
      if (receives_[r] == MPI_REQUEST_NULL) continue;  // this rank, or a wake WokenByPeer already took
      if (!woke_me(r)) MPI_Cancel(&receives_[r]);
      MPI_Wait(&receives_[r], MPI_STATUS_IGNORE);
    }
    MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
    sends_.clear();
    quiet_ = false;
  }

 private:
  static constexpr int kWakeTag = 1;
  static constexpr int kConnectTag = 2;
  void Connect();  // a message each way between this rank and every other, at Start (collective)
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool quiet_ = false;
  Clock::time_point quiet_since_;
  std::vector<MPI_Request> receives_;  // by peer rank, while quiet
  std::vector<MPI_Request> sends_;
};

}  // namespace hvdlite
