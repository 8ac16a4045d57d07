// Tensor fusion: packs ready allreduce responses that can share one collective (same dtype, op and
// scale factors) into batches of at most the fusion threshold. Runs on every rank over the same
// ready list, so every rank gets the same plan without sending it.
#pragma once
#include <cstdint>
#include <vector>

#include "messages.h"

namespace hvdlite {

// Members of one group stay together even past the threshold. threshold_bytes == 0 disables fusion
// (except for groups, which are fused by request).
std::vector<FusedBatch> PlanFusion(const std::vector<const Response *> &ready, int64_t threshold_bytes);

}  // namespace hvdlite
