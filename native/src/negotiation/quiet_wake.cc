#include "negotiation/quiet_wake.h"

namespace hvdlite {

void QuietWake::Start(MPI_Comm world) {
  MPI_Comm_dup(world, &comm_);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm_, &rank);
  MPI_Comm_size(comm_, &size);
  ahead_.clear();
  behind_.clear();
  for (int distance = 1; distance < size; distance *= 2) {
    ahead_.push_back((rank + distance) % size);
    behind_.push_back((rank - distance + size) % size);
  }
  receives_.assign(behind_.size(), MPI_REQUEST_NULL);
  sends_.assign(ahead_.size(), MPI_REQUEST_NULL);
  quiet_ = false;
  Connect();
}

void QuietWake::Connect() {
  // One message each way with every rank this one wakes or is woken by, while all of them are here to make MPI
  // progress.
  std::vector<MPI_Request> requests(2 * ahead_.size(), MPI_REQUEST_NULL);
  for (size_t k = 0; k < ahead_.size(); ++k) {
    MPI_Irecv(nullptr, 0, MPI_BYTE, behind_[k], kConnectTag, comm_, &requests[2 * k]);
    MPI_Isend(nullptr, 0, MPI_BYTE, ahead_[k], kConnectTag, comm_, &requests[2 * k + 1]);
  }
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
}

void QuietWake::Stop() {
  for (MPI_Request &request : receives_) {
    if (request == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
  quiet_ = false;
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void QuietWake::GoQuiet() {
  quiet_ = true;
  quiet_since_ = Clock::now();
  for (size_t k = 0; k < behind_.size(); ++k) {
    MPI_Irecv(nullptr, 0, MPI_BYTE, behind_[k], kWakeTag, comm_, &receives_[k]);
  }
}

bool QuietWake::WokenByPeer() {
  int index = MPI_UNDEFINED, done = 0;
  MPI_Testany(static_cast<int>(receives_.size()), receives_.data(), &index, &done, MPI_STATUS_IGNORE);
  return done && index != MPI_UNDEFINED;  // all null (a job of one rank): nobody can wake it
}

void QuietWake::WakePeers() {
  for (size_t k = 0; k < ahead_.size(); ++k) {
    MPI_Isend(nullptr, 0, MPI_BYTE, ahead_[k], kWakeTag, comm_, &sends_[k]);
  }
}

void QuietWake::Awake() {
  MPI_Waitall(static_cast<int>(receives_.size()), receives_.data(), MPI_STATUSES_IGNORE);
  MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
  quiet_ = false;
}

}  // namespace hvdlite
