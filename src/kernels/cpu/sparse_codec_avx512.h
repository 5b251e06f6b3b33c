#pragma once
// The sparse form's inner loops (kernels/cpu/activation_codec.h) on AVX-512: a vector's non-zero
// test is its bitmap bits, compress packs its non-zero lanes and expand puts them back. 32-bit
// lanes need AVX-512 F, 16-bit ones BW and VBMI2; callers ask sparse_avx512_supported() first.
// They write the same bytes as the portable loops: the bitmap's bit i%8 of byte i/8 is element i,
// values in element order, and no byte past either.
#include <cstddef>
#include <cstdint>

namespace tessera::kernels::detail {

// Whether this CPU runs the kernels below (run-time detection; the build may target less).
bool sparse_avx512_supported();

// Elements [0, n) of `in`: their bitmap into bitmap[0, (n + 7) / 8) and their non-zero elements
// into values; returns how many. `in` starts at a whole byte of the bitmap.
size_t sparse_pack_avx512(uint8_t* bitmap, uint32_t* values, const uint32_t* in, size_t n);
size_t sparse_pack_avx512(uint8_t* bitmap, uint16_t* values, const uint16_t* in, size_t n);

// The inverse: out[0, n) from the bitmap and the values it counts. Reads no value past them.
void sparse_unpack_avx512(uint32_t* out, const uint8_t* bitmap, const uint32_t* values, size_t n);
void sparse_unpack_avx512(uint16_t* out, const uint8_t* bitmap, const uint16_t* values, size_t n);

}  // namespace tessera::kernels::detail
