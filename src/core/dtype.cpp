#include "core/dtype.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

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

void convert_f32_to_bf16(bf16* out, const float* in, size_t n) {
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
