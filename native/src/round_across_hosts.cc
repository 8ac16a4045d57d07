#include "round_across_hosts.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "eager_allreduce.h"
#include "logging.h"

namespace hvdlite {
namespace {

constexpr int kLeadWords = 2;  // each block's round number and length in words

}  // namespace

void RoundAcrossHosts::Start(int rank, const CommContext &local, const CommContext &cross, RingSockets &sockets) {
  Stop();
  local_size_ = local.size;
  if (local.size > 1) MPI_Comm_dup(local.comm, &local_);
  cross_ = cross;
  // A host's key: the world rank of its first rank, the same on every ring.
  int key = rank;
  MPI_Bcast(&key, 1, MPI_INT, 0, local.comm);
  std::vector<int> keys(static_cast<size_t>(cross.size));
  MPI_Allgather(&key, 1, MPI_INT, keys.data(), 1, MPI_INT, cross.comm);
  fold_order_.resize(keys.size());
  std::iota(fold_order_.begin(), fold_order_.end(), 0);
  std::sort(fold_order_.begin(), fold_order_.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  gather_ = std::make_unique<RingGather>(sockets);
  round_ = 0;
}

void RoundAcrossHosts::Stop() {
  if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
  gather_.reset();
}

void RoundAcrossHosts::Fail(const std::string &why) const {
  Log(LogLevel::kError, "a negotiation round across hosts failed: " + why +
                            ". A peer has ended or its host cannot be reached: ending the job.");
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

void RoundAcrossHosts::Allreduce(uint64_t *buffer, int32_t header_words, EagerPlan &eager) {
  const int64_t words = header_words + eager.payload_words();
  if (local_size_ > 1) {
    if (eager.payload_words() > 0) {
      eager.Allreduce(buffer, header_words, local_);
    } else {
      MPI_Allreduce(MPI_IN_PLACE, buffer, header_words, MPI_UINT64_T, MPI_BAND, local_);
    }
  }
  const int64_t block_words = kLeadWords + words;
  const int hosts = cross_.size;
  // Grows to the largest round (the header and the eager bound at most) and stays.
  if (static_cast<int64_t>(blocks_.size()) < hosts * block_words) blocks_.resize(hosts * block_words);
  uint64_t *mine = blocks_.data() + cross_.rank * block_words;
  ++round_;
  mine[0] = round_;
  mine[1] = static_cast<uint64_t>(words);
  std::memcpy(mine + kLeadWords, buffer, words * sizeof(uint64_t));
  const std::string failed =
      gather_->Run(cross_, reinterpret_cast<uint8_t *>(blocks_.data()), block_words * sizeof(uint64_t));
  if (!failed.empty()) Fail(failed);
  for (int h = 0; h < hosts; ++h) {
    const uint64_t *block = blocks_.data() + h * block_words;
    if (block[0] != round_ || block[1] != static_cast<uint64_t>(words)) {
      Fail("host " + std::to_string(h) + " of the ring sent round " + std::to_string(block[0]) + " of " +
           std::to_string(block[1]) + " words where this rank ran round " + std::to_string(round_) + " of " +
           std::to_string(words));
    }
  }
  std::memcpy(buffer, blocks_.data() + fold_order_[0] * block_words + kLeadWords, words * sizeof(uint64_t));
  for (int i = 1; i < hosts; ++i) {
    eager.Combine(blocks_.data() + fold_order_[i] * block_words + kLeadWords, buffer, header_words);
  }
}

}  // namespace hvdlite
