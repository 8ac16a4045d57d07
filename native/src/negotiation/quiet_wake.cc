#include "negotiation/quiet_wake.h"

namespace hvdlite {

void QuietWake::Start(MPI_Comm world) {
  MPI_Comm_dup(world, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  receives_.assign(size_, MPI_REQUEST_NULL);
  sends_.clear();
  sends_.reserve(size_);
  quiet_ = false;
  Connect();
}

void QuietWake::Connect() {
  // One message each way between every two ranks, while all of them are here to make MPI progress.
  std::vector<MPI_Request> requests;
  requests.reserve(2 * size_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    requests.emplace_back();
    MPI_Irecv(nullptr, 0, MPI_BYTE, r, kConnectTag, comm_, &requests.back());
    requests.emplace_back();
    MPI_Isend(nullptr, 0, MPI_BYTE, r, kConnectTag, comm_, &requests.back());
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
  sends_.clear();
  quiet_ = false;
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void QuietWake::GoQuiet() {
  quiet_ = true;
  quiet_since_ = Clock::now();
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) MPI_Irecv(nullptr, 0, MPI_BYTE, r, kWakeTag, comm_, &receives_[r]);
  }
}

void QuietWake::WakePeers() {
  sends_.clear();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    sends_.emplace_back();
    MPI_Isend(nullptr, 0, MPI_BYTE, r, kWakeTag, comm_, &sends_.back());
  }
}

bool QuietWake::WokenByPeer() {
  int index = MPI_UNDEFINED, done = 0;
  MPI_Testany(size_, receives_.data(), &index, &done, MPI_STATUS_IGNORE);
  return done && index != MPI_UNDEFINED;  // all null (a job of one rank): nobody can wake it
}

}  // namespace hvdlite
