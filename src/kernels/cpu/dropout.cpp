#include "kernels/cpu/dropout.h"

#include <algorithm>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

namespace {
// One block of x -> keep(i) ? x / (1 - p) : 0. Parameters by value, so the vectorizer sees them
// as loop invariants (loaded through a lambda's captures, they block vectorization).
template <class T>
void mask_block(T* out, const T* in, size_t lo, size_t hi, float p, compute_t<T> scale, uint64_t seed,
                uint64_t stream, uint64_t offset) {
#pragma omp simd
  for (size_t i = lo; i < hi; ++i) {
    const bool keep = uniform(seed, stream, offset + i) >= p;
    out[i] = store<T>(keep ? load(in[i]) * scale : compute_t<T>(0));
  }
}

// Forward and backward are the same map.
template <class T>
void apply_mask(T* out, const T* in, size_t n, float p, uint64_t seed, uint64_t stream, uint64_t offset,
                const char* name) {
  TS_CHECK(p >= 0.0f && p <= 1.0f, "{}: dropout probability {} must be in [0, 1]", name, p);
  if (p == 0.0f) {
    if (out != in) std::copy(in, in + n, out);
    return;
  }
  using F = compute_t<T>;
  const F scale = p < 1.0f ? static_cast<F>(1.0 / (1.0 - static_cast<double>(p))) : F(0);
  // Philox costs tens of operations per element, so even mid-sized tensors are worth threading.
  detail::for_element_blocks(
      n, 8, [&](size_t lo, size_t hi) { mask_block(out, in, lo, hi, p, scale, seed, stream, offset); });
}
}  // namespace

template <class T>
void dropout_forward(T* out, const T* inp, size_t n, float p, uint64_t seed, uint64_t stream, uint64_t offset) {
  apply_mask(out, inp, n, p, seed, stream, offset, "dropout_forward");
}

template <class T>
void dropout_backward(T* dinp, const T* dout, size_t n, float p, uint64_t seed, uint64_t stream, uint64_t offset) {
  apply_mask(dinp, dout, n, p, seed, stream, offset, "dropout_backward");
}

template void dropout_forward<float>(float*, const float*, size_t, float, uint64_t, uint64_t, uint64_t);
template void dropout_forward<double>(double*, const double*, size_t, float, uint64_t, uint64_t, uint64_t);
template void dropout_backward<float>(float*, const float*, size_t, float, uint64_t, uint64_t, uint64_t);
template void dropout_backward<double>(double*, const double*, size_t, float, uint64_t, uint64_t, uint64_t);
template void dropout_forward<bf16>(bf16*, const bf16*, size_t, float, uint64_t, uint64_t, uint64_t);
template void dropout_forward<f16>(f16*, const f16*, size_t, float, uint64_t, uint64_t, uint64_t);
template void dropout_backward<bf16>(bf16*, const bf16*, size_t, float, uint64_t, uint64_t, uint64_t);
template void dropout_backward<f16>(f16*, const f16*, size_t, float, uint64_t, uint64_t, uint64_t);

}  // namespace tessera::kernels
