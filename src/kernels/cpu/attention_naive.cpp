// The reference attention: plain loops over a materialized att[B,H,T,T]. Its job is to be
// obviously right, so the tiled kernel can be tested against it.
#include <cmath>
#include <cstddef>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/attention.h"

namespace tessera::kernels {

namespace {
void check_shape(int B, int Tn, int C, int H, const char* name) {
  TS_CHECK(B >= 0 && Tn >= 0 && H > 0 && C > 0 && C % H == 0,
           "{}: C={} must be a positive multiple of the number of heads H={} (B={}, T={})", name, C, H, B, Tn);
}
}  // namespace

template <class T>
void attention_forward_naive(T* out, T* att, const T* qkv, int B, int Tn, int C, int H) {
  check_shape(B, Tn, C, H, "attention_forward_naive");
  const int D = C / H;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  const size_t row3 = 3 * static_cast<size_t>(C);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const T* base = qkv + static_cast<size_t>(b) * Tn * row3 + static_cast<size_t>(h) * D;
      for (int t = 0; t < Tn; ++t) {
        const T* q = base + t * row3;
        T* a = att + ((static_cast<size_t>(b) * H + h) * Tn + t) * Tn;
        T mx = -std::numeric_limits<T>::infinity();
        for (int j = 0; j <= t; ++j) {
          const T* k = base + j * row3 + C;
          T s = 0;
          for (int d = 0; d < D; ++d) s += q[d] * k[d];
          a[j] = s * scale;
          mx = a[j] > mx ? a[j] : mx;
        }
        T sum = 0;
        for (int j = 0; j <= t; ++j) {
          a[j] = std::exp(a[j] - mx);
          sum += a[j];
        }
        for (int j = 0; j <= t; ++j) a[j] /= sum;
        for (int j = t + 1; j < Tn; ++j) a[j] = 0;
        T* o = out + (static_cast<size_t>(b) * Tn + t) * C + static_cast<size_t>(h) * D;
        for (int d = 0; d < D; ++d) o[d] = 0;
        for (int j = 0; j <= t; ++j) {
          const T* v = base + j * row3 + 2 * C;
          for (int d = 0; d < D; ++d) o[d] += a[j] * v[d];
        }
      }
    }
  }
}

template <class T>
void attention_backward_naive(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int H) {
  check_shape(B, Tn, C, H, "attention_backward_naive");
  const int D = C / H;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  const size_t row3 = 3 * static_cast<size_t>(C);
  // One (b, h) per thread: dk and dv of a key collect contributions from every later query.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const T* base = qkv + static_cast<size_t>(b) * Tn * row3 + static_cast<size_t>(h) * D;
      T* dbase = dqkv + static_cast<size_t>(b) * Tn * row3 + static_cast<size_t>(h) * D;
      for (int t = 0; t < Tn; ++t) {
        for (int part = 0; part < 3; ++part) {
          for (int d = 0; d < D; ++d) dbase[t * row3 + part * C + d] = 0;
        }
      }
      for (int t = 0; t < Tn; ++t) {
        const T* a = att + ((static_cast<size_t>(b) * H + h) * Tn + t) * Tn;
        const T* dy = dout + (static_cast<size_t>(b) * Tn + t) * C + static_cast<size_t>(h) * D;
        const T* q = base + t * row3;
        T* dq = dbase + t * row3;
        // dP[j] = dy · v_j; softmax backward: dS[j] = P[j] (dP[j] - Σ_i P[i] dP[i]).
        T dot = 0;
        for (int j = 0; j <= t; ++j) {
          const T* v = base + j * row3 + 2 * C;
          T* dv = dbase + j * row3 + 2 * C;
          T dp = 0;
          for (int d = 0; d < D; ++d) {
            dp += dy[d] * v[d];
            dv[d] += a[j] * dy[d];
          }
          dot += a[j] * dp;
        }
        for (int j = 0; j <= t; ++j) {
          const T* v = base + j * row3 + 2 * C;
          const T* k = base + j * row3 + C;
          T* dk = dbase + j * row3 + C;
          T dp = 0;
          for (int d = 0; d < D; ++d) dp += dy[d] * v[d];
          const T ds = a[j] * (dp - dot) * scale;
          for (int d = 0; d < D; ++d) {
            dq[d] += ds * k[d];
            dk[d] += ds * q[d];
          }
        }
      }
    }
  }
}

template void attention_forward_naive<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward_naive<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward_naive<float>(float*, const float*, const float*, const float*, int, int, int, int);
template void attention_backward_naive<double>(double*, const double*, const double*, const double*, int, int, int,
                                               int);

}  // namespace tessera::kernels
