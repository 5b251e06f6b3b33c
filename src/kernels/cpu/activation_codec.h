#pragma once
// Encodings of saved activations (exec/activation_encoding.h): n elements of `element_bytes`
// (4: f32, 2: bf16/f16) or of type T, to and from a smaller form.
//   sign    one bit an element: set where the value is positive (a ReLU's input, whose backward
//           reads nothing else); decodes to 1 where set and 0 elsewhere, so `> 0` gives the same
//           mask. Lossless for that use.
//   sparse  a bitmap of the elements whose bits are not all zero, and those elements in order;
//           decodes to the same bits (Gist's sparse storage). Lossless.
//   fp8     FP8 E4M3 (4 exponent bits, 3 mantissa bits, largest 448, no infinities) with one f32
//           scale per block of kFp8Block elements: the block's largest magnitude maps to 448.
//           Lossy: a relative error of at most 2^-4 for values above the block's subnormal range.
// Every element's bits depend on its own block only, so the result does not depend on threads.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

inline constexpr size_t kFp8Block = 128;

inline size_t sign_bytes(size_t n) { return (n + 7) / 8; }
template <class T>
void sign_encode(uint8_t* bits, const T* in, size_t n);
template <class T>
void sign_decode(T* out, const uint8_t* bits, size_t n);

// Elements whose bits are not all zero.
size_t count_nonzero(const void* in, size_t n, size_t element_bytes);
// The same, but it may stop as soon as the count passes `limit` (returning some count above it):
// deciding whether a sparse form pays need not read a dense tensor to its end.
size_t count_nonzero_until(const void* in, size_t n, size_t element_bytes, size_t limit);
// The instructions the sparse form runs on: AVX-512 compress and expand where this CPU has them (F,
// BW and VBMI2, detected at run time), portable loops elsewhere. Both write the same bytes.
enum class SparseKernels : uint8_t { Portable, Avx512 };
SparseKernels detect_sparse_kernels();
// bitmap: sign_bytes(n) bytes; values: count_nonzero(in) elements, and nothing is written past them.
void sparse_encode(uint8_t* bitmap, void* values, const void* in, size_t n, size_t element_bytes,
                   SparseKernels kernels = detect_sparse_kernels());
void sparse_decode(void* out, const uint8_t* bitmap, const void* values, size_t n, size_t element_bytes,
                   SparseKernels kernels = detect_sparse_kernels());

inline size_t fp8_blocks(size_t n) { return (n + kFp8Block - 1) / kFp8Block; }
template <class T>
void fp8_encode(uint8_t* codes, float* scales, const T* in, size_t n);  // codes[n], scales[fp8_blocks(n)]
template <class T>
void fp8_decode(T* out, const uint8_t* codes, const float* scales, size_t n);

// One value to E4M3 (round to nearest even, saturating at ±448; NaN to NaN) and back.
uint8_t float_to_e4m3(float f);
float e4m3_to_float(uint8_t code);

}  // namespace tessera::kernels
