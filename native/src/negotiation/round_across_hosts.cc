#include "negotiation/round_across_hosts.h"

#include <unistd.h>

#include <cstring>

#include "base/logging.h"

namespace hvdlite {
namespace {

constexpr int kLeadWords = 2;  // each block's round number and length in words

}  // namespace

void RoundAcrossHosts::Start(const CommContext &local, const CommContext &cross, RingSockets &sockets, bool doubling) {
  Stop();
  if (local.size > 1) MPI_Comm_dup(local.comm, &local_);
  cross_ = cross;
  if (doubling) {
    doubling_ = std::make_unique<DoublingExchange>(sockets);
  } else {
    gather_ = std::make_unique<RingGather>(sockets);
  }
  round_ = 0;
}

void RoundAcrossHosts::Stop() {
  if (local_ != MPI_COMM_NULL) MPI_Comm_free(&local_);
  gather_.reset();
  doubling_.reset();
}

void RoundAcrossHosts::Fail(const std::string &why) const {
  Log(LogLevel::kError, "a negotiation round across hosts failed: " + why +
                            ". A peer has ended or its host cannot be reached: ending the job.");
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

void RoundAcrossHosts::Check(const uint64_t *block, int host, int32_t words) const {
  if (block[0] == round_ && block[1] == static_cast<uint64_t>(words)) return;
  Fail("host " + std::to_string(host) + " of the ring sent round " + std::to_string(block[0]) + " of " +
       std::to_string(block[1]) + " words where this rank ran round " + std::to_string(round_) + " of " +
       std::to_string(words));
}

void RoundAcrossHosts::Lead(uint64_t *block, const uint64_t *bits, int32_t words) const {
  block[0] = round_;
  block[1] = static_cast<uint64_t>(words);
  std::memcpy(block + kLeadWords, bits, words * sizeof(uint64_t));
}

void RoundAcrossHosts::Allreduce(uint64_t *bits, int32_t words) {
  if (local_ != MPI_COMM_NULL) MPI_Allreduce(MPI_IN_PLACE, bits, words, MPI_UINT64_T, MPI_BAND, local_);
  ++round_;
  if (doubling_) {
    AcrossHostsByDoubling(bits, words);
  } else {
    AcrossHostsByGather(bits, words);
  }
}

void RoundAcrossHosts::AcrossHostsByGather(uint64_t *bits, int32_t words) {
  const int64_t block_words = kLeadWords + words;
  const int hosts = cross_.size;
  // The same size every round (the cache's capacity and the set's size fix it): sized once.
  if (static_cast<int64_t>(blocks_.size()) != hosts * block_words) blocks_.assign(hosts * block_words, 0);
  Lead(blocks_.data() + cross_.rank * block_words, bits, words);
  const std::string failed =
      gather_->Run(cross_, reinterpret_cast<uint8_t *>(blocks_.data()), block_words * sizeof(uint64_t));
  if (!failed.empty()) Fail(failed);
  for (int h = 0; h < hosts; ++h) {
    const uint64_t *block = blocks_.data() + h * block_words;
    Check(block, h, words);
    if (h == cross_.rank) continue;
    for (int32_t w = 0; w < words; ++w) bits[w] &= block[kLeadWords + w];
  }
}

void RoundAcrossHosts::AcrossHostsByDoubling(uint64_t *bits, int32_t words) {
  const int64_t block_words = kLeadWords + words;
  if (static_cast<int64_t>(blocks_.size()) != 2 * block_words) blocks_.assign(2 * block_words, 0);
  uint64_t *mine = blocks_.data(), *theirs = blocks_.data() + block_words;
  Lead(mine, bits, words);
  const int hosts = cross_.size;
  const std::string failed = doubling_->Run(
      cross_, reinterpret_cast<uint8_t *>(mine), reinterpret_cast<uint8_t *>(theirs),
      block_words * static_cast<int64_t>(sizeof(uint64_t)), [&](int step) {
        Check(theirs, ((cross_.rank - (1 << step)) % hosts + hosts) % hosts, words);
        for (int32_t w = 0; w < words; ++w) mine[kLeadWords + w] &= theirs[kLeadWords + w];
      });
  if (!failed.empty()) Fail(failed);
  std::memcpy(bits, mine + kLeadWords, words * sizeof(uint64_t));
}

}  // namespace hvdlite
