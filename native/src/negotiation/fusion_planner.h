// Tensor fusion: packs ready allreduce responses that can share one collective (same dtype, op and
// scale factors) into batches of at most the fusion threshold. Runs on every rank over the same
// ready list, so every rank gets the same plan without sending it.
#pragma once
#include <cstdint>
#include <vector>

#include "negotiation/messages.h"

namespace hvdlite {

// The batches of one round. Reused from round to round: a batch's lists keep their capacity, so a steady
// step plans without allocating.
class FusionPlan {
 public:
  const FusedBatch *begin() const { return batches_.data(); }
  const FusedBatch *end() const { return batches_.data() + size_; }
  size_t size() const { return size_; }

 private:
  friend void PlanFusion(const std::vector<const Response *> &, int64_t, FusionPlan *);
  void Add(const Response *response, size_t position, int64_t bytes);  // a new batch of one

  std::vector<FusedBatch> batches_;  // the first size_ are this round's
  size_t size_ = 0;
  std::vector<size_t> open_;  // indices of all-reduce batches that may still take more
};

// Members of one group stay together even past the threshold. threshold_bytes == 0 disables fusion
// (except for groups, which are fused by request).
void PlanFusion(const std::vector<const Response *> &ready, int64_t threshold_bytes, FusionPlan *plan);

}  // namespace hvdlite
