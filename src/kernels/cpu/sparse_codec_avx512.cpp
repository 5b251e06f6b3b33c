#include "kernels/cpu/sparse_codec_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <bit>
#include <cstring>

namespace tessera::kernels::detail {

#if defined(__x86_64__)

bool sparse_avx512_supported() {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vbmi2");
  return supported;
}

// Every store of values is masked to the lanes compress filled, and every load of them to the
// lanes expand takes: a full-width access could run past the block's values into those another
// thread writes, or past the end of the encoded tensor. Compress and expand go through a register:
// their memory forms are microcoded and slow on AMD's Zen 4.
#define TESSERA_AVX512_SPARSE __attribute__((target("avx512f,avx512bw,avx512vbmi2,popcnt")))

TESSERA_AVX512_SPARSE size_t sparse_pack_avx512(uint8_t* bitmap, uint32_t* values, const uint32_t* in, size_t n) {
  size_t k = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i v = _mm512_loadu_si512(in + i);
    const __mmask16 nonzero = _mm512_test_epi32_mask(v, v);
    std::memcpy(bitmap + i / 8, &nonzero, 2);
    const unsigned c = static_cast<unsigned>(std::popcount(static_cast<unsigned>(nonzero)));
    _mm512_mask_storeu_epi32(values + k, static_cast<__mmask16>((1u << c) - 1), _mm512_maskz_compress_epi32(nonzero, v));
    k += c;
  }
  if (i < n) {
    const size_t rest = n - i;
    const __m512i v = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << rest) - 1), in + i);
    const __mmask16 nonzero = _mm512_test_epi32_mask(v, v);
    std::memcpy(bitmap + i / 8, &nonzero, (rest + 7) / 8);
    const unsigned c = static_cast<unsigned>(std::popcount(static_cast<unsigned>(nonzero)));
    _mm512_mask_storeu_epi32(values + k, static_cast<__mmask16>((1u << c) - 1), _mm512_maskz_compress_epi32(nonzero, v));
    k += c;
  }
  return k;
}

TESSERA_AVX512_SPARSE size_t sparse_pack_avx512(uint8_t* bitmap, uint16_t* values, const uint16_t* in, size_t n) {
  size_t k = 0, i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_loadu_si512(in + i);
    const __mmask32 nonzero = _mm512_test_epi16_mask(v, v);
    std::memcpy(bitmap + i / 8, &nonzero, 4);
    const unsigned c = static_cast<unsigned>(std::popcount(static_cast<uint32_t>(nonzero)));
    _mm512_mask_storeu_epi16(values + k, static_cast<__mmask32>((uint64_t{1} << c) - 1),
                             _mm512_maskz_compress_epi16(nonzero, v));
    k += c;
  }
  if (i < n) {
    const size_t rest = n - i;
    const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << rest) - 1), in + i);
    const __mmask32 nonzero = _mm512_test_epi16_mask(v, v);
    std::memcpy(bitmap + i / 8, &nonzero, (rest + 7) / 8);
    const unsigned c = static_cast<unsigned>(std::popcount(static_cast<uint32_t>(nonzero)));
    _mm512_mask_storeu_epi16(values + k, static_cast<__mmask32>((uint64_t{1} << c) - 1),
                             _mm512_maskz_compress_epi16(nonzero, v));
    k += c;
  }
  return k;
}

TESSERA_AVX512_SPARSE void sparse_unpack_avx512(uint32_t* out, const uint8_t* bitmap, const uint32_t* values,
                                                size_t n) {
  size_t k = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    uint16_t nonzero = 0;
    std::memcpy(&nonzero, bitmap + i / 8, 2);
    const unsigned c = static_cast<unsigned>(std::popcount(nonzero));
    const __m512i v = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << c) - 1), values + k);
    _mm512_storeu_si512(out + i, _mm512_maskz_expand_epi32(nonzero, v));
    k += c;
  }
  if (i < n) {
    const size_t rest = n - i;
    uint16_t nonzero = 0;
    std::memcpy(&nonzero, bitmap + i / 8, (rest + 7) / 8);
    // Bits past n in the last byte are zero as the encoder wrote them, but a bitmap is not trusted
    // to say which of out's lanes exist.
    nonzero = static_cast<uint16_t>(nonzero & ((1u << rest) - 1));
    const unsigned c = static_cast<unsigned>(std::popcount(nonzero));
    const __m512i v = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << c) - 1), values + k);
    _mm512_mask_storeu_epi32(out + i, static_cast<__mmask16>((1u << rest) - 1), _mm512_maskz_expand_epi32(nonzero, v));
  }
}

TESSERA_AVX512_SPARSE void sparse_unpack_avx512(uint16_t* out, const uint8_t* bitmap, const uint16_t* values,
                                                size_t n) {
  size_t k = 0, i = 0;
  for (; i + 32 <= n; i += 32) {
    uint32_t nonzero = 0;
    std::memcpy(&nonzero, bitmap + i / 8, 4);
    const unsigned c = static_cast<unsigned>(std::popcount(nonzero));
    const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << c) - 1), values + k);
    _mm512_storeu_si512(out + i, _mm512_maskz_expand_epi16(nonzero, v));
    k += c;
  }
  if (i < n) {
    const size_t rest = n - i;
    uint32_t nonzero = 0;
    std::memcpy(&nonzero, bitmap + i / 8, (rest + 7) / 8);
    const auto lanes = static_cast<__mmask32>((uint64_t{1} << rest) - 1);
    nonzero &= lanes;
    const unsigned c = static_cast<unsigned>(std::popcount(nonzero));
    const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << c) - 1), values + k);
    _mm512_mask_storeu_epi16(out + i, lanes, _mm512_maskz_expand_epi16(nonzero, v));
  }
}

#undef TESSERA_AVX512_SPARSE

#else  // not x86-64: the portable loops serve

bool sparse_avx512_supported() { return false; }
size_t sparse_pack_avx512(uint8_t*, uint32_t*, const uint32_t*, size_t) { return 0; }
size_t sparse_pack_avx512(uint8_t*, uint16_t*, const uint16_t*, size_t) { return 0; }
void sparse_unpack_avx512(uint32_t*, const uint8_t*, const uint32_t*, size_t) {}
void sparse_unpack_avx512(uint16_t*, const uint8_t*, const uint16_t*, size_t) {}

#endif

}  // namespace tessera::kernels::detail
