#include "base/reduce_kernels.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/copy_bytes.h"
#include "base/half.h"

namespace hvdlite {
namespace {

#if defined(__x86_64__)
// Half types on x86 with AVX2 and F16C (checked at run time): 8 elements per step, converted to float32
// in registers. Results are bitwise those of the portable loops: the conversions are exact (to float32)
// or round to nearest even (back), and the float32 operations are the same. min/max take their arguments
// in the order that gives std::min/std::max's answer when one is NaN.
#define HVDLITE_AVX2 __attribute__((target("avx2,fma,f16c")))

HVDLITE_AVX2 inline __m256 LoadHalf8(const uint16_t *p, bool bf16) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
  if (!bf16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

HVDLITE_AVX2 inline void StoreHalf8(uint16_t *p, __m256 v, bool bf16) {
  __m128i h;
  if (!bf16) {
    h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    rounded = _mm256_blendv_epi8(rounded, quiet, nan);
    // Pack the eight 32-bit lanes (values < 65536) to 16 bits, in order.
    __m256i packed = _mm256_packus_epi32(rounded, rounded);
    h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i *>(p), h);
}

template <bool kBFloat16>
HVDLITE_AVX2 int64_t ReduceHalfAvx2(uint16_t *d, const uint16_t *x, const uint16_t *y, int64_t count, ReduceOp op) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 a = LoadHalf8(x + i, kBFloat16), b = LoadHalf8(y + i, kBFloat16), r;
    switch (op) {
      case ReduceOp::kMin: r = _mm256_min_ps(b, a); break;
      case ReduceOp::kMax: r = _mm256_max_ps(b, a); break;
      case ReduceOp::kProduct: r = _mm256_mul_ps(a, b); break;
      default: r = _mm256_add_ps(a, b); break;
    }
    StoreHalf8(d + i, r, kBFloat16);
  }
  return i;  // the caller finishes the tail
}

template <bool kBFloat16>
HVDLITE_AVX2 int64_t ScaleHalfAvx2(uint16_t *d, const uint16_t *s, int64_t count, float factor) {
  const __m256 f = _mm256_set1_ps(factor);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) StoreHalf8(d + i, _mm256_mul_ps(LoadHalf8(s + i, kBFloat16), f), kBFloat16);
  return i;
}

bool HasAvx2F16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}
#endif

// dst = a (op) b. dst is either a itself or memory apart from both; each case gets a loop whose
// pointers cannot alias, so it vectorises without run-time overlap checks.
template <typename T, typename F>
void CombineInPlace(T *__restrict dst, const T *__restrict src, int64_t count, F f) {
  for (int64_t i = 0; i < count; ++i) dst[i] = f(dst[i], src[i]);
}

template <typename T, typename F>
void CombineApart(T *__restrict dst, const T *__restrict a, const T *__restrict b, int64_t count, F f) {
  for (int64_t i = 0; i < count; ++i) dst[i] = f(a[i], b[i]);
}

// dst = a (op) b. dst is either a itself or memory apart from both; each case gets a loop whose
// pointers cannot alias, so it vectorises without run-time overlap checks.
template <typename T, typename F>
void Combine(T *dst, const T *a, const T *b, int64_t count, F f) {
  if (dst == a) CombineInPlace(dst, b, count, f);
  else CombineApart(dst, a, b, count, f);
}

template <typename T>
void ReduceTyped(void *dst, const void *a, const void *b, int64_t count, ReduceOp op) {
  T *d = static_cast<T *>(dst);
  const T *x = static_cast<const T *>(a);
  const T *y = static_cast<const T *>(b);
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum: Combine(d, x, y, count, [](T p, T q) { return static_cast<T>(p + q); }); break;
    case ReduceOp::kMin: Combine(d, x, y, count, [](T p, T q) { return std::min(p, q); }); break;
    case ReduceOp::kMax: Combine(d, x, y, count, [](T p, T q) { return std::max(p, q); }); break;
    case ReduceOp::kProduct: Combine(d, x, y, count, [](T p, T q) { return static_cast<T>(p * q); }); break;
    case ReduceOp::kAdasum: break;  // combined tensor by tensor by AdasumAllreduce, never here
  }
}

// Half types: convert a block to float32, reduce, convert back. The block keeps the float copies in
// registers/L1 and lets each of the three loops vectorise on its own. On x86 with AVX2 and F16C, whole
// vectors go through registers first and only the tail takes the blocks.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ReduceHalf(void *dst, const void *a, const void *b, int64_t count, ReduceOp op) {
  constexpr int64_t kBlock = 256;
  uint16_t *d = static_cast<uint16_t *>(dst);
  const uint16_t *x = static_cast<const uint16_t *>(a);
  const uint16_t *y = static_cast<const uint16_t *>(b);
#if defined(__x86_64__)
  if (HasAvx2F16c()) {
    int64_t done = ToFloat == BFloat16ToFloat ? ReduceHalfAvx2<true>(d, x, y, count, op)
                                              : ReduceHalfAvx2<false>(d, x, y, count, op);
    d += done;
    x += done;
    y += done;
    count -= done;
  }
#endif
  float fa[kBlock], fb[kBlock];
  for (int64_t start = 0; start < count; start += kBlock) {
    int64_t n = std::min(kBlock, count - start);
    for (int64_t i = 0; i < n; ++i) fa[i] = ToFloat(x[start + i]);
    for (int64_t i = 0; i < n; ++i) fb[i] = ToFloat(y[start + i]);
    ReduceTyped<float>(fa, fa, fb, n, op);
    for (int64_t i = 0; i < n; ++i) d[start + i] = FromFloat(fa[i]);
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
  int64_t i = 0;
#if defined(__x86_64__)
  if (HasAvx2F16c()) i = ToFloat == BFloat16ToFloat ? ScaleHalfAvx2<true>(d, s, count, f) : ScaleHalfAvx2<false>(d, s, count, f);
#endif
  for (; i < count; ++i) d[i] = FromFloat(ToFloat(s[i]) * f);
}

// Integers scale as Horovod scales them: in double, truncated back to the integer type.
template <typename T>
void ScaleIntegerTyped(void *dst, const void *src, int64_t count, double factor) {
  T *d = static_cast<T *>(dst);
  const T *s = static_cast<const T *>(src);
  for (int64_t i = 0; i < count; ++i) d[i] = static_cast<T>(static_cast<double>(s[i]) * factor);
}

template <typename T>
void DivideTyped(void *buffer, int64_t count, int64_t divisor) {
  T *b = static_cast<T *>(buffer);
  for (int64_t i = 0; i < count; ++i) b[i] = static_cast<T>(b[i] / divisor);
}

}  // namespace

void ReduceTo(void *dst, const void *a, const void *b, int64_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kUInt8: ReduceTyped<uint8_t>(dst, a, b, count, op); break;
    case DataType::kInt8: ReduceTyped<int8_t>(dst, a, b, count, op); break;
    case DataType::kInt16: ReduceTyped<int16_t>(dst, a, b, count, op); break;
    case DataType::kInt32: ReduceTyped<int32_t>(dst, a, b, count, op); break;
    case DataType::kInt64: ReduceTyped<int64_t>(dst, a, b, count, op); break;
    case DataType::kFloat32: ReduceTyped<float>(dst, a, b, count, op); break;
    case DataType::kFloat64: ReduceTyped<double>(dst, a, b, count, op); break;
    case DataType::kFloat16: ReduceHalf<Float16ToFloat, FloatToFloat16>(dst, a, b, count, op); break;
    case DataType::kBFloat16: ReduceHalf<BFloat16ToFloat, FloatToBFloat16>(dst, a, b, count, op); break;
    case DataType::kBool: ReduceTyped<bool>(dst, a, b, count, op); break;
    case DataType::kUInt16: ReduceTyped<uint16_t>(dst, a, b, count, op); break;
  }
}

void ReduceInto(void *dst, const void *src, int64_t count, DataType dtype, ReduceOp op) {
  ReduceTo(dst, dst, src, count, dtype, op);
}

void ScaleCopy(void *dst, const void *src, int64_t count, DataType dtype, double factor) {
  if (factor == 1.0 || dtype == DataType::kBool) {
    const size_t bytes = static_cast<size_t>(count) * DataTypeSize(dtype);
    const auto *to = static_cast<const uint8_t *>(dst), *from = static_cast<const uint8_t *>(src);
    if (to + bytes <= from || from + bytes <= to) CopyBytes(dst, src, bytes);
    else if (dst != src) std::memmove(dst, src, bytes);
    return;
  }
  switch (dtype) {
    case DataType::kFloat32: ScaleTyped<float>(dst, src, count, factor); break;
    case DataType::kFloat64: ScaleTyped<double>(dst, src, count, factor); break;
    case DataType::kFloat16: ScaleHalf<Float16ToFloat, FloatToFloat16>(dst, src, count, factor); break;
    case DataType::kBFloat16: ScaleHalf<BFloat16ToFloat, FloatToBFloat16>(dst, src, count, factor); break;
    case DataType::kUInt8: ScaleIntegerTyped<uint8_t>(dst, src, count, factor); break;
    case DataType::kInt8: ScaleIntegerTyped<int8_t>(dst, src, count, factor); break;
    case DataType::kInt16: ScaleIntegerTyped<int16_t>(dst, src, count, factor); break;
    case DataType::kUInt16: ScaleIntegerTyped<uint16_t>(dst, src, count, factor); break;
    case DataType::kInt32: ScaleIntegerTyped<int32_t>(dst, src, count, factor); break;
    case DataType::kInt64: ScaleIntegerTyped<int64_t>(dst, src, count, factor); break;
    case DataType::kBool: break;
  }
}

void DivideIntegers(void *buffer, int64_t count, DataType dtype, int64_t divisor) {
  switch (dtype) {
    case DataType::kUInt8: DivideTyped<uint8_t>(buffer, count, divisor); break;
    case DataType::kInt8: DivideTyped<int8_t>(buffer, count, divisor); break;
    case DataType::kInt16: DivideTyped<int16_t>(buffer, count, divisor); break;
    case DataType::kUInt16: DivideTyped<uint16_t>(buffer, count, divisor); break;
    case DataType::kInt32: DivideTyped<int32_t>(buffer, count, divisor); break;
    case DataType::kInt64: DivideTyped<int64_t>(buffer, count, divisor); break;
    default: break;
  }
}

void FinishReduction(void *out, const void *reduced, int64_t count, DataType dtype, ReduceOp op, double postscale,
                     int32_t set_size) {
  const bool average = op == ReduceOp::kAverage;
  if (IsFloatingPoint(dtype) || postscale != 1.0) {
    // Integers with a postscale: one truncation of sum * postscale / size, as Horovod computes it.
    ScaleCopy(out, reduced, count, dtype, postscale / (average ? set_size : 1));
  } else {
    if (out != reduced) CopyBytes(out, reduced, count * DataTypeSize(dtype));
    if (average) DivideIntegers(out, count, dtype, set_size);
  }
}

}  // namespace hvdlite
