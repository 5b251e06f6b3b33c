#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

namespace {
// Rotates by +angle (forward) or -angle (backward). Angles are computed in double for every
// instantiation, so the float kernel's only error is the final rounding of cos and sin.
template <class T>
void rotate(T* out, const T* inp, int B, int Tn, int C, int H, int Hkv, float theta, int position0, bool inverse,
            const char* name) {
  using F = compute_t<T>;
  const QkvHeads heads = qkv_heads(B, Tn, C, H, Hkv, name);
  const int D = heads.D;
  TS_CHECK(D % 2 == 0, "{}: head dimension D = C/H = {} must be even to rotate pairs (i, i + D/2)", name, D);
  TS_CHECK(theta > 0.0f, "{}: theta = {} must be positive", name, theta);
  TS_CHECK(position0 >= 0, "{}: the first position {} must not be negative", name, position0);
  const int half = D / 2;
  const size_t row = static_cast<size_t>(heads.row());
  const size_t t_stride = static_cast<size_t>(Tn) * row;
  // Positions outer, batch inner: the angles of position t are computed once for all B rows.
  constexpr int kChunk = 32;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(static_cast<size_t>(B) * Tn * row))
  for (int t = 0; t < Tn; ++t) {
    for (int i0 = 0; i0 < half; i0 += kChunk) {
      const int len = std::min(kChunk, half - i0);
      F cos_t[kChunk], sin_t[kChunk];
      for (int i = 0; i < len; ++i) {
        const double inv_freq = std::pow(static_cast<double>(theta), -2.0 * (i0 + i) / D);
        const double angle = static_cast<double>(position0 + t) * inv_freq;
        cos_t[i] = static_cast<F>(std::cos(angle));
        sin_t[i] = static_cast<F>(inverse ? -std::sin(angle) : std::sin(angle));
      }
      for (int b = 0; b < B; ++b) {
        const size_t base = b * t_stride + t * row;
        // q and k heads are H + Hkv consecutive groups of D values.
        for (int g = 0; g < H + Hkv; ++g) {
          const T* x = inp + base + static_cast<size_t>(g) * D + i0;
          T* y = out + base + static_cast<size_t>(g) * D + i0;
#pragma omp simd
          for (int i = 0; i < len; ++i) {
            const F x1 = load(x[i]), x2 = load(x[i + half]);
            y[i] = store<T>(x1 * cos_t[i] - x2 * sin_t[i]);
            y[i + half] = store<T>(x2 * cos_t[i] + x1 * sin_t[i]);
          }
        }
      }
    }
    if (out != inp) {
      for (int b = 0; b < B; ++b) {
        const size_t v = b * t_stride + t * row + static_cast<size_t>(heads.value(0));
        std::copy(inp + v, inp + v + static_cast<size_t>(Hkv) * D, out + v);
      }
    }
  }
}
}  // namespace

template <class T>
void rope_forward(T* out, const T* inp, int B, int Tn, int C, int H, int Hkv, float theta, int position0) {
  rotate(out, inp, B, Tn, C, H, Hkv, theta, position0, false, "rope_forward");
}

template <class T>
void rope_backward(T* dinp, const T* dout, int B, int Tn, int C, int H, int Hkv, float theta, int position0) {
  rotate(dinp, dout, B, Tn, C, H, Hkv, theta, position0, true, "rope_backward");
}

template void rope_forward<float>(float*, const float*, int, int, int, int, int, float, int);
template void rope_forward<double>(double*, const double*, int, int, int, int, int, float, int);
template void rope_backward<float>(float*, const float*, int, int, int, int, int, float, int);
template void rope_backward<double>(double*, const double*, int, int, int, int, int, float, int);
template void rope_forward<bf16>(bf16*, const bf16*, int, int, int, int, int, float, int);
template void rope_forward<f16>(f16*, const f16*, int, int, int, int, int, float, int);
template void rope_backward<bf16>(bf16*, const bf16*, int, int, int, int, int, float, int);
template void rope_backward<f16>(f16*, const f16*, int, int, int, int, int, float, int);

}  // namespace tessera::kernels
