// Bits carried in an all-reduce's elements (carried_round.h): every dtype and op that may carry them gives back the
// AND of the ranks' bits, reduced by the same kernels the algorithms use, at the largest rank counts allowed.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "negotiation/carried_round.h"
#include "base/reduce_kernels.h"

namespace hvdlite {
namespace {

const DataType kDtypes[] = {DataType::kUInt8, DataType::kInt8, DataType::kInt16, DataType::kUInt16,
                            DataType::kInt32, DataType::kInt64, DataType::kFloat16, DataType::kBFloat16,
                            DataType::kFloat32, DataType::kFloat64, DataType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// Each rank's first count bits through Encode, reduced rank by rank, then Decode: compared with the AND.
void ExpectAndOfRanks(DataType dtype, ReduceOp op, int32_t ranks, uint32_t seed) {
  constexpr int32_t kCount = 150, kWords = 3;
  std::mt19937 random(seed);
  // Most bits set on most ranks, as in a round: an AND of independent coin flips would be almost always clear.
  std::bernoulli_distribution mostly_set(1.0 - 1.0 / (2.0 * ranks));
  std::vector<uint64_t> expected(kWords, ~uint64_t{0});
  const size_t size = DataTypeSize(dtype);
  std::vector<uint8_t> reduced(kCount * size), mine(kCount * size);
  for (int32_t r = 0; r < ranks; ++r) {
    std::vector<uint64_t> words(kWords, 0);
    for (int32_t b = 0; b < kCount; ++b) {
      if (mostly_set(random)) words[b / 64] |= uint64_t{1} << (b % 64);
    }
    for (int32_t w = 0; w < kWords; ++w) expected[w] &= words[w];
    EncodeBits(words.data(), kCount, dtype, op, r == 0 ? reduced.data() : mine.data());
    if (r > 0) ReduceInto(reduced.data(), mine.data(), kCount, dtype, op);
  }
  std::vector<uint64_t> decoded(kWords, 0xa5a5a5a5a5a5a5a5ull);  // bits after the range stay as they were
  DecodeBits(reduced.data(), kCount, dtype, op, ranks, decoded.data());
  for (int32_t b = 0; b < kWords * 64; ++b) {
    const bool inside = b < kCount;
    const uint64_t &source = inside ? expected[b / 64] : uint64_t{0xa5a5a5a5a5a5a5a5ull};
    ASSERT_EQ((decoded[b / 64] >> (b % 64)) & 1, (source >> (b % 64)) & 1)
        << "dtype " << static_cast<int>(dtype) << " op " << static_cast<int>(op) << " ranks " << ranks << " bit " << b;
  }
}

TEST(CarriedRound, EveryDtypeAndOpThatMayCarryGivesTheAndOfTheRanks) {
  int checked = 0;
  for (DataType dtype : kDtypes) {
    for (ReduceOp op : kOps) {
      for (int32_t ranks : {1, 2, 3, 4, 7, 127, 128, 256, 257, 2048, 2049}) {
        if (!CanCarryBits(dtype, op, ranks)) continue;
        ExpectAndOfRanks(dtype, op, ranks, static_cast<uint32_t>(ranks * 131 + checked));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(CarriedRound, SumsThatTheDtypeCannotCountExactlyDoNotCarry) {
  EXPECT_TRUE(CanCarryBits(DataType::kInt8, ReduceOp::kSum, 127));
  EXPECT_FALSE(CanCarryBits(DataType::kInt8, ReduceOp::kSum, 128));  // 128 ones wrap to -128
  EXPECT_FALSE(CanCarryBits(DataType::kUInt8, ReduceOp::kAverage, 256));
  EXPECT_TRUE(CanCarryBits(DataType::kBFloat16, ReduceOp::kSum, 256));
  EXPECT_FALSE(CanCarryBits(DataType::kBFloat16, ReduceOp::kSum, 257));  // 257 is no bfloat16
  EXPECT_FALSE(CanCarryBits(DataType::kFloat16, ReduceOp::kSum, 2049));
  EXPECT_FALSE(CanCarryBits(DataType::kBool, ReduceOp::kSum, 2));  // a sum of bools is an OR
  EXPECT_TRUE(CanCarryBits(DataType::kBool, ReduceOp::kMin, 4096));
  EXPECT_FALSE(CanCarryBits(DataType::kFloat32, ReduceOp::kAdasum, 2));
}

}  // namespace
}  // namespace hvdlite
