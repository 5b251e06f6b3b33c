#pragma once
// Global gradient-norm clipping over many buffers (PyTorch clip_grad_norm_ with the 2-norm).
#include <cstddef>
#include <span>
#include <utility>

namespace tessera::kernels {

// Σ x[i]^2 over n elements, accumulated in double. The summation order is fixed (independent of
// the thread count), so the result is reproducible bit for bit.
double sum_of_squares(const float* x, size_t n);
double sum_of_squares(const double* x, size_t n);

// The fixed order sum_of_squares adds in, for a caller that has the buffer a piece at a time (a
// gradient written to the nvme tier as backward completes it): the buffer is cut into
// kSquareChunks runs of square_chunk_elements(n) elements (the last ones shorter or empty), each
// summed by sum_of_squares_chunk, and the chunks' sums are added in chunk order from 0.0. Summing
// each chunk where it lies and adding the sums the same way gives sum_of_squares's bits.
inline constexpr size_t kSquareChunks = 64;
inline size_t square_chunk_elements(size_t n) { return (n + kSquareChunks - 1) / kSquareChunks; }
double sum_of_squares_chunk(const float* x, size_t n);

// Returns the total 2-norm over all buffers (pointer, element count). When max_norm > 0 and
// max_norm / (norm + 1e-6) < 1, scales every buffer by that factor, as PyTorch does. A non-finite
// norm is returned without touching the buffers, so the caller can skip the step.
double clip_grad_norm(std::span<const std::pair<float*, size_t>> buffers, double max_norm);
double clip_grad_norm(std::span<const std::pair<double*, size_t>> buffers, double max_norm);

}  // namespace tessera::kernels
