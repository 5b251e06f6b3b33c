#pragma once
// Element types and their conversions. bf16 rounds to nearest even (as hardware and PyTorch do);
// f16 uses the F16C instructions where the build target has them and an exact software path
// otherwise. NaN stays NaN through every conversion.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessera {

enum class DType : uint8_t { F32, BF16, F16, I32, I8, U8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::I8: case DType::U8: return 1;
  }
  return 0;
}
std::string_view dtype_name(DType t);

struct bf16 { uint16_t bits; };
struct f16 { uint16_t bits; };

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Branch-free (a select, not a jump), so that loops storing bf16 vectorize.
inline bf16 to_bf16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // ties go to the even result
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return bf16{static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}
inline float to_float(bf16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

f16 to_f16(float f);
float to_float(f16 h);

// Bulk conversions (vectorized where the CPU allows). f32 to bf16 runs on AVX-512 BF16's
// conversion where the CPU has it (detected at run time) and gives to_bf16's bits either way.
void convert_f32_to_bf16(bf16* out, const float* in, size_t n);
void convert_bf16_to_f32(float* out, const bf16* in, size_t n);
void convert_f32_to_f16(f16* out, const float* in, size_t n);
void convert_f16_to_f32(float* out, const f16* in, size_t n);

// Portable software conversions, the reference the F16C path is tested against.
uint16_t f16_bits_reference(float f);
float f16_value_reference(uint16_t h);

}  // namespace tessera
