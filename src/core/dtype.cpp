#include "core/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>

namespace tessera {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I8: return "i8";
    case DType::U8: return "u8";
  }
  return "?";
}

namespace {
// IEEE binary16 from binary32 with round-to-nearest-even, subnormals and overflow to infinity.
uint16_t f32_to_f16_bits_software(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): value = abs_float / 2^-24, rounded to nearest even.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    // half mantissa = mant24 * 2^(exp - 126): drop (126 - exp) bits, between 14 and 24.
    uint32_t dropped_bits = 126u - (abs >> 23);
    uint32_t half = mant >> dropped_bits;
    uint32_t rem = mant & ((1u << dropped_bits) - 1u);
    uint32_t midpoint = 1u << (dropped_bits - 1u);
    if (rem > midpoint || (rem == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float f16_bits_to_f32_software(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // Subnormal: mant * 2^-24.
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
}  // namespace

f16 to_f16(float f) {
#if defined(__F16C__)
  return f16{static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))};
#else
  return f16{f32_to_f16_bits_software(f)};
#endif
}

float to_float(f16 h) {
#if defined(__F16C__)
  return _cvtsh_ss(h.bits);
#else
  return f16_bits_to_f32_software(h.bits);
#endif
}

namespace {
#if defined(__x86_64__)
bool cpu_converts_to_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

// VCVTNEPS2BF16 rounds to nearest even and quiets a NaN (its bits >> 16, | 0x40) as to_bf16 does, but
// reads a denormal input as zero: lanes holding one take to_bf16's integer rounding instead. The
// result equals to_bf16 on every one of the 2^32 inputs.
#define TESSERA_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

TESSERA_AVX512_BF16 __m256i bf16_of(__m512 v) {
  __m256i narrow = (__m256i)_mm512_cvtneps_pbh(v);
  const __m512i u = _mm512_castps_si512(v), a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 denormal = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x00800000)) & _mm512_test_epi32_mask(a, a);
  if (denormal != 0) {
    const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(denormal, u, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_maskz_srli_epi32(denormal, _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    narrow = _mm512_mask_cvtepi32_epi16(narrow, denormal, rounded);
  }
  return narrow;
}

TESSERA_AVX512_BF16 void convert_f32_to_bf16_avx512(bf16* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bf16_of(_mm512_loadu_ps(in + i)));
  if (i < n) {
    const auto lanes = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(out + i, lanes, bf16_of(_mm512_maskz_loadu_ps(lanes, in + i)));
  }
}

#undef TESSERA_AVX512_BF16
#else
bool cpu_converts_to_bf16() { return false; }
void convert_f32_to_bf16_avx512(bf16*, const float*, size_t) {}
#endif
}  // namespace

void convert_f32_to_bf16(bf16* out, const float* in, size_t n) {
  if (cpu_converts_to_bf16()) {
    constexpr size_t kChunk = size_t{1} << 14;
    const size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > (1u << 16))
    for (size_t c = 0; c < chunks; ++c) {
      convert_f32_to_bf16_avx512(out + c * kChunk, in + c * kChunk, std::min(kChunk, n - c * kChunk));
    }
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}
void convert_bf16_to_f32(float* out, const bf16* in, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}
void convert_f32_to_f16(f16* out, const float* in, size_t n) {
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) out[i] = to_f16(in[i]);
}
void convert_f16_to_f32(float* out, const f16* in, size_t n) {
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

// The software paths are the reference the F16C path is tested against.
uint16_t f16_bits_reference(float f) { return f32_to_f16_bits_software(f); }
float f16_value_reference(uint16_t h) { return f16_bits_to_f32_software(h); }

}  // namespace tessera
