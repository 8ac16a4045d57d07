#include "base/copy_bytes.h"

#include <cstdint>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hvdlite {
namespace {

constexpr size_t kVectorCopyMin = 256;         // smaller copies: memcpy uses plain register moves
constexpr size_t kVectorCopyMax = size_t{1} << 20;  // larger ones: glibc streams them without rep movsb

#if defined(__x86_64__)
__attribute__((target("avx2"))) void CopyAvx2(uint8_t *dst, const uint8_t *src, size_t bytes) {
  size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i + 96), d);
  }
  for (; i + 32 <= bytes; i += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i)));
  }
  if (i < bytes) std::memcpy(dst + i, src + i, bytes - i);
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

}  // namespace

void CopyBytes(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= kVectorCopyMin && bytes < kVectorCopyMax && HasAvx2()) {
    CopyAvx2(static_cast<uint8_t *>(dst), static_cast<const uint8_t *>(src), bytes);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace hvdlite
