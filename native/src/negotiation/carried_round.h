// A negotiation round carried inside the last all-reduce of the round before it: each bit of the round's vector
// travels as one element of the batch's dtype, appended to the batch, and the batch's own reduction (sum, min,
// max or product) computes the AND of the bits over the ranks. While a training step keeps tensors coming, every
// round after its first thus rides in a collective that runs anyway, and no separate round is exchanged. The
// vector is the one a round exchanges on its own (negotiation.h), so agreement is as strict: every rank decodes
// the same bits and runs the same responses in the same order.
//
// Only exact arithmetic may carry: a sum of ones must count the ranks exactly in the dtype (float16 to 2048 ranks,
// bfloat16 to 256, 8-bit integers below 128), and Adasum is no element-wise reduction.
#pragma once
#include <cstdint>

#include "base/types.h"

namespace hvdlite {

// Whether a batch of this dtype and op, reduced over this many ranks, can carry bits exactly.
bool CanCarryBits(DataType dtype, ReduceOp op, int32_t ranks);

// The first count bits of words, as this rank's vote on each: count elements of dtype at elements.
void EncodeBits(const uint64_t *words, int32_t count, DataType dtype, ReduceOp op, uint8_t *elements);

// The reduced elements back into the first count bits of words: set where every rank's vote was set; the bits after
// them are left as they are.
void DecodeBits(const uint8_t *elements, int32_t count, DataType dtype, ReduceOp op, int32_t ranks, uint64_t *words);

}  // namespace hvdlite
