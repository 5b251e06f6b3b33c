#pragma once
// Inverted dropout driven by the counter-based RNG (core/rng.h): element i is kept iff
// uniform(seed, stream, offset + i) >= p, and kept elements are scaled by 1 / (1 - p). No mask is
// stored: backward regenerates it from the same (seed, stream, offset). Shapes: n elements.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/element.h"

namespace tessera::kernels {

// out[n] from inp[n]; p in [0, 1]; p == 0 copies, p == 1 zeroes.
template <class T>
void dropout_forward(T* out, const T* inp, size_t n, float p, uint64_t seed, uint64_t stream, uint64_t offset);

// dinp[n] written from dout[n] with the same mask.
template <class T>
void dropout_backward(T* dinp, const T* dout, size_t n, float p, uint64_t seed, uint64_t stream, uint64_t offset);

}  // namespace tessera::kernels
