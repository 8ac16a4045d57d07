// Quiet: when a round shows that no rank has anything to do, every rank stops running rounds until one of
// them gets work and sends each of the others a wake message (looked for once per cycle); the first round
// awake then tells every rank which peers sent one, so each takes exactly those and no stale wake is left
// to be mistaken for a later one.
//
// Every receive names its sender: a quiet rank posts one receive per peer. Receives from MPI_ANY_SOURCE were
// lost on MPICH's UCX network layer over TCP (a rank waited forever for a wake its peer had sent), while
// receives from a named peer, and their cancellation, work on every layer.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <vector>

namespace hvdlite {

class QuietWake {
 public:
  // Wake messages travel on a communicator of their own (a duplicate of world), apart from everything else.
  void Start(MPI_Comm world);
  void Stop();  // cancels what quiet posted and frees the communicator
  bool quiet() const { return quiet_; }
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
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool quiet_ = false;
  std::vector<MPI_Request> receives_;  // by peer rank, while quiet
  std::vector<MPI_Request> sends_;
};

}  // namespace hvdlite
