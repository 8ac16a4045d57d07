// The reduce kernels against float64 references, and float16/bfloat16 rounding to nearest even.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/half.h"
#include "base/reduce_kernels.h"

namespace hvdlite {
namespace {

TEST(HalfTypes, Float16RoundsToNearestEven) {
  EXPECT_EQ(FloatToFloat16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFloat16(65504.0f), 0x7bff);                    // largest finite
  EXPECT_EQ(FloatToFloat16(1e6f), 0x7c00);                        // overflow: infinity
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(FloatToFloat16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(FloatToFloat16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(Float16ToFloat(0x0001), std::ldexp(1.0f, -24));      // smallest subnormal
  EXPECT_TRUE(std::isnan(Float16ToFloat(FloatToFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfTypes, BFloat16RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie to even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie to even, upward
  EXPECT_EQ(BFloat16ToFloat(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfTypes, EveryFloat16SurvivesARoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = Float16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToFloat16(f), h) << "half bits " << h;
  }
}

template <typename T>
void ExpectReduce(DataType dtype, ReduceOp op, std::vector<T> a, const std::vector<T> &b,
                  const std::vector<double> &want) {
  ReduceInto(a.data(), b.data(), static_cast<int64_t>(a.size()), dtype, op);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(static_cast<double>(a[i]), want[i]) << "element " << i;
}

TEST(ReduceInto, EveryOpOnIntegersAndFloats) {
  ExpectReduce<int32_t>(DataType::kInt32, ReduceOp::kSum, {1, -2, 3}, {4, 5, -6}, {5, 3, -3});
  ExpectReduce<int32_t>(DataType::kInt32, ReduceOp::kAverage, {1, -2, 3}, {4, 5, -6}, {5, 3, -3});  // sums
  ExpectReduce<int64_t>(DataType::kInt64, ReduceOp::kMin, {1, -2, 3}, {4, 5, -6}, {1, -2, -6});
  ExpectReduce<uint8_t>(DataType::kUInt8, ReduceOp::kMax, {1, 200, 3}, {4, 5, 250}, {4, 200, 250});
  ExpectReduce<int8_t>(DataType::kInt8, ReduceOp::kProduct, {2, -3, 4}, {5, 6, -7}, {10, -18, -28});
  ExpectReduce<double>(DataType::kFloat64, ReduceOp::kSum, {0.5, -1.25}, {0.25, 4.0}, {0.75, 2.75});
  ExpectReduce<float>(DataType::kFloat32, ReduceOp::kProduct, {1.5f, -2.0f}, {2.0f, 0.25f}, {3.0, -0.5});
}

TEST(ReduceInto, HalfTypesReduceThroughFloat32AndRoundOnce) {
  // 2048 + 1 is not a float16 (the spacing there is 2): the sum rounds to even, 2048.
  std::vector<uint16_t> a = {FloatToFloat16(2048.0f), FloatToFloat16(1.5f)};
  std::vector<uint16_t> b = {FloatToFloat16(1.0f), FloatToFloat16(2.25f)};
  ReduceInto(a.data(), b.data(), 2, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(Float16ToFloat(a[0]), 2048.0f);
  EXPECT_EQ(Float16ToFloat(a[1]), 3.75f);
  std::vector<uint16_t> c = {FloatToBFloat16(256.0f), FloatToBFloat16(-3.0f)};
  std::vector<uint16_t> d = {FloatToBFloat16(1.0f), FloatToBFloat16(0.5f)};
  ReduceInto(c.data(), d.data(), 2, DataType::kBFloat16, ReduceOp::kMax);
  EXPECT_EQ(BFloat16ToFloat(c[0]), 256.0f);
  EXPECT_EQ(BFloat16ToFloat(c[1]), 0.5f);
}

TEST(FinishReduction, AverageDividesOnceThenPostscalesAndIntegersTruncate) {
  std::vector<float> sum = {6.0f, -3.0f};
  std::vector<float> out(2);
  FinishReduction(out.data(), sum.data(), 2, DataType::kFloat32, ReduceOp::kAverage, 2.0, 3);
  EXPECT_EQ(out[0], 4.0f);
  EXPECT_EQ(out[1], -2.0f);
  std::vector<int32_t> isum = {7, -7};
  FinishReduction(isum.data(), isum.data(), 2, DataType::kInt32, ReduceOp::kAverage, 1.0, 2);
  EXPECT_EQ(isum[0], 3);   // toward zero
  EXPECT_EQ(isum[1], -3);
  // A postscale on integers: one truncation of sum * postscale / size, computed in double.
  std::vector<int64_t> lsum = {7, -7, 5};
  FinishReduction(lsum.data(), lsum.data(), 3, DataType::kInt64, ReduceOp::kAverage, 3.0, 2);
  EXPECT_EQ(lsum, (std::vector<int64_t>{10, -10, 7}));
}

TEST(ScaleCopy, ScalesFloatsAndIntegersAndCopiesAtOne) {
  std::vector<double> x = {1.0, -2.0};
  ScaleCopy(x.data(), x.data(), 2, DataType::kFloat64, 0.5);
  EXPECT_EQ(x[0], 0.5);
  EXPECT_EQ(x[1], -1.0);
  std::vector<int16_t> src = {3, -4}, dst(2);
  ScaleCopy(dst.data(), src.data(), 2, DataType::kInt16, 1.0);
  EXPECT_EQ(dst, src);
  // Integers scale in double and truncate toward zero, as Horovod scales them.
  ScaleCopy(dst.data(), src.data(), 2, DataType::kInt16, 0.5);
  EXPECT_EQ(dst, (std::vector<int16_t>{1, -2}));
  std::vector<uint8_t> bytes = {3, 250};
  ScaleCopy(bytes.data(), bytes.data(), 2, DataType::kUInt8, 0.1);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0, 25}));
}

}  // namespace
}  // namespace hvdlite
