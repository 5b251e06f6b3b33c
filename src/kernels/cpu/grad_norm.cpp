#include "kernels/cpu/grad_norm.h"

#include <array>
#include <cmath>

#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

namespace {
template <class T>
double chunk_squares(const T* x, size_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

template <class T>
double sum_squares(const T* x, size_t n) {
  // A fixed number of chunks, summed in chunk order: the bits do not depend on how many threads
  // the chunks were spread over (an OpenMP reduction clause would combine in arrival order).
  std::array<double, kSquareChunks> partial{};
  const size_t chunk = square_chunk_elements(n);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n))
  for (size_t k = 0; k < kSquareChunks; ++k) {
    const size_t lo = std::min(n, k * chunk);
    const size_t hi = std::min(n, lo + chunk);
    partial[k] = chunk_squares(x + lo, hi - lo);
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

template <class T>
double clip(std::span<const std::pair<T*, size_t>> buffers, double max_norm) {
  double total = 0;
  for (const auto& [ptr, n] : buffers) total += sum_squares(ptr, n);
  const double norm = std::sqrt(total);
  if (!(max_norm > 0) || !std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  const T s = static_cast<T>(coef);
  for (const auto& [ptr, n] : buffers) {
    T* p = ptr;
    detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
      for (size_t i = lo; i < hi; ++i) p[i] *= s;
    });
  }
  return norm;
}
}  // namespace

double sum_of_squares(const float* x, size_t n) { return sum_squares(x, n); }
double sum_of_squares(const double* x, size_t n) { return sum_squares(x, n); }
double sum_of_squares_chunk(const float* x, size_t n) { return chunk_squares(x, n); }

double clip_grad_norm(std::span<const std::pair<float*, size_t>> buffers, double max_norm) {
  return clip(buffers, max_norm);
}
double clip_grad_norm(std::span<const std::pair<double*, size_t>> buffers, double max_norm) {
  return clip(buffers, max_norm);
}

}  // namespace tessera::kernels
