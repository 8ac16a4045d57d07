#include "reduce_kernels.h"

#include <algorithm>
#include <cstring>

#include "half.h"

namespace hvdlite {
namespace {

template <typename T, typename F>
void Combine(T *__restrict dst, const T *__restrict src, int64_t count, F f) {
  for (int64_t i = 0; i < count; ++i) dst[i] = f(dst[i], src[i]);
}

template <typename T>
void ReduceTyped(void *dst, const void *src, int64_t count, ReduceOp op) {
  T *d = static_cast<T *>(dst);
  const T *s = static_cast<const T *>(src);
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum: Combine(d, s, count, [](T a, T b) { return static_cast<T>(a + b); }); break;
    case ReduceOp::kMin: Combine(d, s, count, [](T a, T b) { return std::min(a, b); }); break;
    case ReduceOp::kMax: Combine(d, s, count, [](T a, T b) { return std::max(a, b); }); break;
    case ReduceOp::kProduct: Combine(d, s, count, [](T a, T b) { return static_cast<T>(a * b); }); break;
    case ReduceOp::kAdasum: break;  // rejected during negotiation
  }
}

// Half types: convert a block to float32, reduce, convert back. The block keeps the float copies in
// registers/L1 and lets each of the three loops vectorise on its own.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ReduceHalf(void *dst, const void *src, int64_t count, ReduceOp op) {
  constexpr int64_t kBlock = 256;
  uint16_t *d = static_cast<uint16_t *>(dst);
  const uint16_t *s = static_cast<const uint16_t *>(src);
  float a[kBlock], b[kBlock];
  for (int64_t start = 0; start < count; start += kBlock) {
    int64_t n = std::min(kBlock, count - start);
    for (int64_t i = 0; i < n; ++i) a[i] = ToFloat(d[start + i]);
    for (int64_t i = 0; i < n; ++i) b[i] = ToFloat(s[start + i]);
    ReduceTyped<float>(a, b, n, op);
    for (int64_t i = 0; i < n; ++i) d[start + i] = FromFloat(a[i]);
  }
}

template <typename T>
void ScaleTyped(void *dst, const void *src, int64_t count, double factor) {
  T *__restrict d = static_cast<T *>(dst);
  const T *s = static_cast<const T *>(src);
  const T f = static_cast<T>(factor);
  for (int64_t i = 0; i < count; ++i) d[i] = s[i] * f;
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ScaleHalf(void *dst, const void *src, int64_t count, double factor) {
  uint16_t *d = static_cast<uint16_t *>(dst);
  const uint16_t *s = static_cast<const uint16_t *>(src);
  const float f = static_cast<float>(factor);
  for (int64_t i = 0; i < count; ++i) d[i] = FromFloat(ToFloat(s[i]) * f);
}

template <typename T>
void DivideTyped(void *buffer, int64_t count, int64_t divisor) {
  T *b = static_cast<T *>(buffer);
  for (int64_t i = 0; i < count; ++i) b[i] = static_cast<T>(b[i] / divisor);
}

}  // namespace

void ReduceInto(void *dst, const void *src, int64_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kUInt8: ReduceTyped<uint8_t>(dst, src, count, op); break;
    case DataType::kInt8: ReduceTyped<int8_t>(dst, src, count, op); break;
    case DataType::kInt16: ReduceTyped<int16_t>(dst, src, count, op); break;
    case DataType::kInt32: ReduceTyped<int32_t>(dst, src, count, op); break;
    case DataType::kInt64: ReduceTyped<int64_t>(dst, src, count, op); break;
    case DataType::kFloat32: ReduceTyped<float>(dst, src, count, op); break;
    case DataType::kFloat64: ReduceTyped<double>(dst, src, count, op); break;
    case DataType::kFloat16: ReduceHalf<Float16ToFloat, FloatToFloat16>(dst, src, count, op); break;
    case DataType::kBFloat16: ReduceHalf<BFloat16ToFloat, FloatToBFloat16>(dst, src, count, op); break;
    case DataType::kBool: ReduceTyped<bool>(dst, src, count, op); break;
  }
}

void ScaleCopy(void *dst, const void *src, int64_t count, DataType dtype, double factor) {
  if (factor == 1.0 || !IsFloatingPoint(dtype)) {
    if (dst != src) std::memmove(dst, src, count * DataTypeSize(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kFloat32: ScaleTyped<float>(dst, src, count, factor); break;
    case DataType::kFloat64: ScaleTyped<double>(dst, src, count, factor); break;
    case DataType::kFloat16: ScaleHalf<Float16ToFloat, FloatToFloat16>(dst, src, count, factor); break;
    case DataType::kBFloat16: ScaleHalf<BFloat16ToFloat, FloatToBFloat16>(dst, src, count, factor); break;
    default: break;
  }
}

void DivideIntegers(void *buffer, int64_t count, DataType dtype, int64_t divisor) {
  switch (dtype) {
    case DataType::kUInt8: DivideTyped<uint8_t>(buffer, count, divisor); break;
    case DataType::kInt8: DivideTyped<int8_t>(buffer, count, divisor); break;
    case DataType::kInt16: DivideTyped<int16_t>(buffer, count, divisor); break;
    case DataType::kInt32: DivideTyped<int32_t>(buffer, count, divisor); break;
    case DataType::kInt64: DivideTyped<int64_t>(buffer, count, divisor); break;
    default: break;
  }
}

}  // namespace hvdlite
